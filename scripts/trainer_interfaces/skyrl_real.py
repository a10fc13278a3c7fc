"""gym-serve's SkyRL adapter against SkyRL's real types and `validate_generator_output`, on Python 3.12 (not CI).

SkyRL 0.4 needs Python 3.12; CI checks the adapter against the contract copied into tests/trainer_contracts.py.

    python3.12 -m venv /tmp/skyrl-env && /tmp/skyrl-env/bin/pip install torch==2.13.0 skyrl==0.4.0 loguru \
        skyrl-gym aiohttp orjson pybase64 ray torchdata jaxtyping pytest pytest-asyncio pyyaml jsonschema
    PYTHONPATH=. /tmp/skyrl-env/bin/python scripts/trainer_interfaces/skyrl_real.py
"""

import asyncio

from skyrl.train.generators.base import BatchMetadata, GeneratorInput, GeneratorInterface, TrajectoryID
from skyrl.train.utils.trainer_utils import validate_generator_output

from gym_serve.trainers.skyrl import GymServeGenerator
from tests.test_trainers import CannedSource


class GymServeSkyRLGenerator(GymServeGenerator, GeneratorInterface):
    """The adapter may also subclass SkyRL's ABC, as `get_generator`'s annotation asks."""


async def main() -> None:
    ids = [TrajectoryID(instance_id=uid, repetition_id=r) for uid in ("a", "b") for r in range(3)]
    batch = GeneratorInput(
        prompts=[[{"role": "user", "content": t.instance_id}] for t in ids],
        env_classes=["gym_serve"] * 6,
        env_extras=[{} for _ in ids],
        sampling_params={"temperature": 1.0},
        trajectory_ids=ids,
        batch_metadata=BatchMetadata(global_step=0, training_phase="train"),
    )
    generator = GymServeSkyRLGenerator(lambda: CannedSource(frozenset({(1, 2)})), eos_token_id=2)
    out = await generator.generate(batch)
    validate_generator_output(len(batch["prompts"]), out)
    assert out["stop_reasons"][-1] == "error" and out["loss_masks"][-1] == [0]
    print("ok: SkyRL validated gym-serve's generator output", out["rewards"])


if __name__ == "__main__":
    asyncio.run(main())
