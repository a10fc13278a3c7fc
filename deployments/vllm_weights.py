"""One vLLM replica's side of a weight update: check the new weights, load them into the running engine, version.

`gym_serve.models.weights` drives an update across the replicas; here is what
each replica does with it.

*Prepare* checks the new weights against the checkpoint the engine started
from (its safetensors headers, read once): every tensor present, none
unknown, shapes equal, floating point, values finite. This is the whole
defence: vLLM's in-place reload moves each layer to the `meta` device while it
loads, so a wrong name or shape part-way through leaves the engine broken, a
missing tensor is silently left uninitialised and NaN weights answer NaN.
Tensors from the object store are checked in memory and written, as one
safetensors file, to a temporary folder (in `/dev/shm` where it exists):
tensors cannot cross vLLM's `collective_rpc` to the worker process, a path can.

*Apply* is vLLM's own protocol for RL weight updates:
`pause_generation(mode="keep", clear_cache=True)` freezes the requests in
flight and drops the KV and prefix caches (they were computed by the old
weights), `collective_rpc("reload_weights", weights_path=...)` loads the folder
in place on every worker (vLLM's layerwise reload, which redoes the CPU or GPU
kernel packing), `update_weight_version` labels the tokens sampled from then on,
and `resume_generation` lets the frozen requests continue: they recompute their
context under the new weights and go on sampling, so a call in flight during an
update finishes, its earlier tokens from the old version and its later ones from
the new, each token's log-prob exact for the version that sampled it
(`policy_version_spans` on the token bundle says where the versions change).
Calls that arrive during the update wait and run on the new version.

If a load fails after the checks passed, the engine stays paused and the
replica reports itself unhealthy: Serve replaces it, and the replacement starts
on the current version.

On GPUs the same two phases hold; only the transport changes. vLLM 0.32's
`weight_transfer_config={"backend": "nccl"}` gives each engine
`init_weight_transfer_engine` (once: the trainer's ranks and every replica's
workers form one NCCL group, so the replica set is fixed while it lives), then
`start_weight_update` / `update_weights` / `finish_weight_update(weight_version)`
per update, inside the same pause and resume; the trainer broadcasts the tensors
from GPU memory. Prepare would check the names and shapes the trainer announces
in `update_info` against the same schema before `start_weight_update`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gym_serve.errors import InvalidWeights, WeightsError
from gym_serve.models.weights import PolicyState, WeightSource, policy_store

__all__ = ["EngineWeights", "checkpoint_schema", "weight_problems"]

log = logging.getLogger(__name__)

Schema = dict[str, list[int]]
"""Tensor name → shape."""


def checkpoint_schema(folder: Path) -> Schema:
    """The tensors of the safetensors checkpoint in `folder`, from the file headers (no tensor data is read)."""
    from safetensors import safe_open

    schema: Schema = {}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InvalidWeights(f"{folder}: no *.safetensors files")
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                schema[name] = list(f.get_slice(name).get_shape())
    return schema


def weight_problems(served: Schema, new: Schema) -> list[str]:
    """What keeps new weights (`new`, name → shape) from replacing the served model's; [] when nothing does.

    >>> weight_problems({"a": [2, 3], "b": [3]}, {"a": [3, 2], "c": [1]})
    ["unknown tensor 'c'", "tensor 'a' has shape [3, 2], the served model's is [2, 3]", "missing tensor 'b'"]
    """
    problems = [f"unknown tensor {name!r}" for name in new if name not in served]
    problems += [
        f"tensor {name!r} has shape {shape}, the served model's is {served[name]}"
        for name, shape in new.items()
        if name in served and shape != served[name]
    ]
    problems += [f"missing tensor {name!r}" for name in served if name not in new]
    return problems


class EngineWeights:
    """The weights of one replica's `AsyncLLM`: their version, and updates checked, loaded and labelled."""

    def __init__(self, engine: Any, base: str, app: str, replica: str) -> None:
        self.engine = engine
        self.base = Path(base)
        self.replica = replica
        self.version = 0
        self.broken: str | None = None
        """Why the replica must be replaced (a load failed after its checks passed)."""
        self._store = policy_store(app)
        self._schema: Schema | None = None
        self._prepared: dict[int, asyncio.Task[tuple[Path, bool]]] = {}  # version → (folder to load, temporary?)
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Come up on the policy's current version (a replica started after updates, or a replacement)."""
        state: PolicyState = await self._store.attach.remote(str(self.base))
        if state.version > 0 and state.source is not None:
            await self.apply(state.version, state.source)
        else:
            await self.engine.update_weight_version("0")

    async def follow(self, every_s: float) -> None:
        """Catch up with the store now and then: a replica that missed an update's broadcast loads it late."""
        while True:
            await asyncio.sleep(every_s)
            try:
                state: PolicyState = await self._store.state.remote()
                if state.version > self.version and state.source is not None:
                    await self.apply(state.version, state.source)
            except Exception as e:  # the next round tries again; a refused source stays refused
                log.warning("catching up with policy version failed: %s", e)

    def status(self) -> dict[str, Any]:
        return {"replica": self.replica, "version": self.version}

    async def prepare(self, version: int, source: WeightSource) -> dict[str, Any]:
        """Check the update against the served model without touching the engine, and keep it ready to load."""
        if version > self.version:
            await self._folder(version, source)
        return self.status()

    async def apply(self, version: int, source: WeightSource) -> dict[str, Any]:
        """Load `version` (prepared now if it was not) between a pause and a resume; older versions are skipped."""
        async with self._lock:
            if version > self.version:
                folder = await self._folder(version, source)
                await self._load(folder, version)
            for stale in [v for v in self._prepared if v <= self.version]:
                self.discard(stale)
        return self.status()

    def discard(self, version: int) -> dict[str, Any]:
        """Forget a prepared update (refused elsewhere, or superseded), removing its temporary copy."""
        task = self._prepared.pop(version, None)
        if task is not None:
            task.add_done_callback(_remove_temporary)
        return self.status()

    async def _folder(self, version: int, source: WeightSource) -> Path:
        """The checked folder of `version`: prepared once, however many callers ask at once."""
        task = self._prepared.get(version)
        if task is None:
            task = self._prepared[version] = asyncio.ensure_future(
                asyncio.to_thread(self._checked_folder, version, source)
            )
        try:
            folder, _ = await asyncio.shield(task)
        except Exception:
            if self._prepared.get(version) is task:  # a later call checks again
                del self._prepared[version]
            raise
        return folder

    async def _load(self, folder: Path, version: int) -> None:
        await self.engine.pause_generation(mode="keep", clear_cache=True)
        try:
            await self.engine.collective_rpc(
                "reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True}
            )
            await self.engine.update_weight_version(str(version))
        except Exception as e:  # the checks passed, so the engine may be half-loaded: never serve from it
            self.broken = f"loading policy version {version} from {folder} failed: {e}"
            raise WeightsError(self.broken) from e
        self.version = version
        await self.engine.resume_generation()

    def _checked_folder(self, version: int, source: WeightSource) -> tuple[Path, bool]:
        """The folder to load `version` from, after every check (runs in a thread: it reads all the weights)."""
        if self._schema is None:
            if not self.base.is_dir():
                raise WeightsError(f"weight updates need `engine.model` to be a local folder, not {self.base}")
            self._schema = checkpoint_schema(self.base)
        if source.checkpoint is not None:
            folder = Path(source.checkpoint)
            if not folder.is_dir():
                raise InvalidWeights(f"version {version}: checkpoint folder {folder} does not exist on this node")
            self._check(version, source, checkpoint_schema(folder), _nonfinite_in_folder(folder))
            return folder, False
        import ray

        tensors = ray.get(source.tensors)
        if not isinstance(tensors, dict):
            raise InvalidWeights(f"version {version}: tensors must be a dict of name → tensor, not {type(tensors)}")
        self._check(version, source, _tensor_schema(version, tensors), _nonfinite(tensors))
        return _write_temporary(tensors), True

    def _check(self, version: int, source: WeightSource, schema: Schema, values: list[str]) -> None:
        assert self._schema is not None
        problems = weight_problems(self._schema, schema) + values
        if problems:
            more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
            raise InvalidWeights(f"version {version} from {source.describe()}: {'; '.join(problems[:8])}{more}")


def _tensor_schema(version: int, tensors: dict[Any, Any]) -> Schema:
    import torch

    wrong = [repr(name) for name, t in tensors.items() if not isinstance(t, torch.Tensor)]
    if wrong:
        raise InvalidWeights(f"version {version}: not tensors: {', '.join(wrong[:8])}")
    return {str(name): list(t.shape) for name, t in tensors.items()}


def _value_problems(name: str, tensor: Any) -> list[str]:
    import torch

    if not tensor.is_floating_point():
        return [f"tensor {name!r} is {tensor.dtype}, not floating point"]
    if not bool(torch.isfinite(tensor).all()):
        return [f"tensor {name!r} holds NaN or infinity"]
    return []


def _nonfinite(tensors: dict[str, Any]) -> list[str]:
    return [problem for name, t in tensors.items() for problem in _value_problems(name, t)]


def _nonfinite_in_folder(folder: Path) -> list[str]:
    """What is wrong with the values in the folder's safetensors files (read one tensor at a time)."""
    from safetensors import safe_open

    found = []
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                found += _value_problems(name, f.get_tensor(name))
    return found


def _remove_temporary(task: asyncio.Task[tuple[Path, bool]]) -> None:
    if not task.cancelled() and task.exception() is None:
        folder, temporary = task.result()
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)


def _write_temporary(tensors: dict[str, Any]) -> Path:
    """The tensors as one safetensors file in a fresh folder, in memory-backed /dev/shm where there is one."""
    from safetensors.torch import save_file

    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="gym-serve-weights-", dir=shm if shm.is_dir() else None))
    seen: set[int] = set()
    own = {}
    for name, t in tensors.items():  # safetensors refuses tensors that share memory (tied weights): copy those
        t = t.contiguous()
        own[name] = t.clone() if t.data_ptr() in seen else t
        seen.add(t.data_ptr())
    save_file(own, str(folder / "model.safetensors"))
    return folder
