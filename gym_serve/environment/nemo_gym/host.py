"""One NeMo Gym resources server, unchanged, in this process: its FastAPI app called through ASGI, no network.

`NemoGymServer` puts the server behind the runner interface the Environment
tier calls (`describe`, `seed`, `call_tools`, `verify`, as `EnvRunner`), with
NeMo Gym's `simple_agent` semantics:

- `seed` POSTs the whole row to `/seed_session`; a non-2xx fails the rollout
  (`env_error`).
- Each function call POSTs its parsed arguments to `/<tool>`, in order; the
  response body, whatever its status, is the tool output the model sees (a
  404 for an unknown tool, a 422 for arguments that do not fit, a 500 with the
  exception's repr). Arguments that are not JSON never reach the server: the
  model sees `{"error": "Invalid tool call arguments: ..."}`. Calls to the
  server's own protocol routes (`seed_session`, `verify`, ...) are answered
  as unknown tools, so a policy cannot reach the verifier through a tool call
  (simple_agent would forward them).
- `verify` POSTs the row plus `response` to `/verify` within our own deadline
  (NeMo Gym's judge calls retry a refused connection forever); a non-2xx, a
  timeout, or a verdict that NeMo Gym's judge failsafe marked
  (`_ng_failure_class`) fails the rollout. The verify JSON is the verdict:
  `reward`, `mask_sample`, `failure_kind`, `failure_reason` and the server's
  own fields land on the rollout row.

Sessions. NeMo Gym ties a rollout's calls together with a signed session
cookie (its session middleware pair) and keeps the rollout's state in the
server process's memory, keyed by the session's id. Each seeded rollout gets a
session here: the `request.session` dict every call of the rollout is handed
in its ASGI scope, named as NeMo Gym names it, plus any cookies the server
sets. The cookie middleware pair is left out of the app: encoding, signing and
decoding a cookie per call, and an HTTP middleware's task group per call, were
half of the hosted server's CPU. The state the agent carries is only the session's key, so a
call that reaches a replica that does not hold the session (its replica went
away) fails as `session_lost` instead of silently running against empty state.
A session ends after its verify, or after `session_idle_s` without a call (a
rollout abandoned midway). Ending one drops its cookies and, where the server
accepts NeMo Gym's cookie close (`POST /close_session` with an empty body,
which servers that seed through `/run` implement), closes it on the server.
Other servers never free what they keep per legacy session, under NeMo Gym too.

Importing `nemo_gym` changes the importing process; this module imports it
only when a server is built (in an Environment replica) and puts back what the
import changed (`sys.path`, `print`, environment variables), see `_contained`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import importlib
import inspect
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from gym_serve.environment.nemo_gym import catalog
from gym_serve.environment.runner import EnvInfo
from gym_serve.errors import EnvError, JudgeError, SessionLostError, VerifierTimeoutError, VerifyError

__all__ = ["NemoGymServer"]

log = logging.getLogger(__name__)

PROTOCOL_ROUTES = frozenset({"seed_session", "close_session", "verify", "aggregate_metrics", "reverify_mode"})
"""The server's own routes: never reachable as a tool."""

NOT_FOUND = '{"detail":"Not Found"}'
"""What an unknown tool answers (FastAPI's 404 body), and what a protocol route called as a tool gets."""

_SWEEP_EVERY_S = 60.0


@dataclass
class _Session:
    data: dict[str, Any]  # the server's `request.session`
    cookies: dict[str, str] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)


class NemoGymServer:
    """A NeMo Gym resources server hosted in-process, for many concurrent rollouts (see the module docstring)."""

    def __init__(
        self,
        server: str,
        config: dict[str, Any] | None = None,
        *,
        verify_timeout_s: float = 120.0,
        session_idle_s: float = 1800.0,
        endpoints: dict[str, str] | None = None,
    ) -> None:
        for warning in catalog.check_server(server):
            log.warning("%s", warning)
        self.name = server
        self.verify_timeout_s = verify_timeout_s
        self.session_idle_s = session_idle_s
        self.app, self.server = _build(server, config or {}, endpoints or {})
        from nemo_gym.server_utils import SESSION_ID_KEY  # imported by `_build`

        self._session_id_key = SESSION_ID_KEY
        self.closes_cookie_sessions = _accepts_cookie_close(type(self.server))
        self.info = EnvInfo(
            name=catalog.hosted_name(server),
            tools=[],
            has_seed=True,
            has_user_turn=False,
            replica_sessions=True,
            verify_timeout_s=verify_timeout_s,
        )
        self._sessions: dict[str, _Session] = {}
        self._swept = time.monotonic()
        self._abandoned: set[asyncio.Future[Any]] = set()
        self._background: set[asyncio.Future[Any]] = set()

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def describe(self) -> EnvInfo:
        return self.info

    async def seed(self, row: dict[str, Any]) -> dict[str, Any]:
        """Start the rollout's session: `POST /seed_session` with the whole row, as simple_agent does."""
        self._sweep()
        session = _Session({self._session_id_key: str(uuid.uuid4())})  # as NeMo Gym's session middleware names it
        try:
            status, body = await self._post("/seed_session", row, session)
        except Exception as e:
            raise EnvError(f"NeMo Gym server `{self.name}`: /seed_session raised {type(e).__name__}: {e}") from e
        if not 200 <= status < 300:
            raise EnvError(f"NeMo Gym server `{self.name}`: /seed_session answered {status}: {_excerpt(body)}")
        key = uuid.uuid4().hex
        self._sessions[key] = session
        return {"session": key}

    async def call_tools(
        self, calls: list[dict[str, Any]], state: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Run one model turn's function calls in order; every answer is the model's to read."""
        session = self._session(state)
        outputs = []
        for call in calls:
            name = str(call.get("name", ""))
            try:  # simple_agent's parsing and message, exactly: the model reads them
                arguments = json.loads(call.get("arguments"))  # type: ignore[arg-type]
            except (json.JSONDecodeError, TypeError) as e:
                text = json.dumps({"error": f"Invalid tool call arguments: {e!r}"})
            else:
                text = NOT_FOUND if name in PROTOCOL_ROUTES else await self._tool(name, arguments, session)
            outputs.append({"type": "function_call_output", "call_id": call.get("call_id", ""), "output": text})
        return outputs, state

    async def user_turn(self, row: dict[str, Any], response: dict[str, Any], state: Any) -> tuple[None, Any]:
        raise EnvError(f"NeMo Gym server `{self.name}` has no user turn")  # describe() says so: never called

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """`POST /verify` with the row plus `response`; the verify JSON, less the echoed request, is the verdict."""
        session = self._session(state)
        body = {**row, "response": _with_response_defaults(response, row)}
        call = asyncio.ensure_future(self._post("/verify", body, session))
        try:
            done, _ = await asyncio.wait({call}, timeout=self.verify_timeout_s)
            if not done:
                self._abandon(call)
                raise VerifierTimeoutError(
                    f"NeMo Gym server `{self.name}`: /verify did not answer within {self.verify_timeout_s:g} s "
                    f"(a judge it calls may be down: NeMo Gym retries a refused connection forever)"
                )
            status, raw = call.result()
        except VerifyError:
            raise
        except Exception as e:
            raise VerifyError(f"NeMo Gym server `{self.name}`: /verify raised {type(e).__name__}: {e}") from e
        finally:
            await self._end(state["session"])
        if not 200 <= status < 300:
            raise VerifyError(f"NeMo Gym server `{self.name}`: /verify answered {status}: {_excerpt(raw)}")
        verdict = orjson.loads(raw)
        if not isinstance(verdict, dict) or not isinstance(verdict.get("reward"), int | float):
            raise VerifyError(f"NeMo Gym server `{self.name}`: /verify answered no reward: {_excerpt(raw)}")
        if verdict.get("_ng_failure_class"):
            raise JudgeError(
                f"NeMo Gym server `{self.name}`: {verdict['_ng_failure_class']}: "
                f"{verdict.get('failure_reason') or verdict.get('_ng_failure_judge_error')}"
            )
        for echoed in ("responses_create_params", "response"):
            verdict.pop(echoed, None)
        return verdict

    def _abandon(self, call: asyncio.Future[Any]) -> None:
        """Stop waiting for a verify past its deadline. NeMo Gym's judge retry loop does not stop when cancelled
        (it runs in a task group of the server's middleware), so the call is cancelled and let go, not awaited."""
        call.cancel()
        self._abandoned.add(call)
        call.add_done_callback(self._abandoned.discard)
        log.warning("NeMo Gym server `%s`: %d verifies past their deadline run on", self.name, len(self._abandoned))

    async def _tool(self, name: str, arguments: Any, session: _Session) -> str:
        try:
            _, body = await self._post(f"/{name}", arguments, session)
        except Exception as e:
            return self._tool_failure(name, e)
        return body.decode(errors="replace")

    def _tool_failure(self, name: str, e: Exception) -> str:
        """What NeMo Gym's exception middleware answers for a tool that raised: a 500 whose body (what the model
        reads) is the exception's repr as JSON, or, for a failed call to another server, that server's answer."""
        log.warning("NeMo Gym server `%s`: tool `%s` raised", self.name, name, exc_info=e)
        inner = getattr(e, "response_content", None)
        if inner is not None:
            key = self.server.get_session_middleware_key()
            return orjson.dumps(f"Hit an exception in {key} calling an inner server: {inner}").decode()
        return orjson.dumps(repr(e)).decode()

    def _session(self, state: Any) -> _Session:
        key = state.get("session") if isinstance(state, dict) else None
        session = self._sessions.get(key) if isinstance(key, str) else None
        if session is None:
            raise SessionLostError(
                f"NeMo Gym server `{self.name}`: this replica holds no session `{key}` (the replica that seeded "
                f"the rollout went away, or the session ended or idled out after {self.session_idle_s:g} s)"
            )
        session.last_used = time.monotonic()
        return session

    async def _end(self, key: str) -> None:
        session = self._sessions.pop(key, None)
        if session is not None and self.closes_cookie_sessions:
            await self._close(session)

    async def _close(self, session: _Session) -> None:
        try:
            await self._post("/close_session", {}, session)
        except Exception as e:  # the verdict stands; only the server's own cleanup failed
            log.warning("NeMo Gym server `%s`: /close_session raised %s: %s", self.name, type(e).__name__, e)

    def _sweep(self) -> None:
        """End sessions no call has touched for `session_idle_s` (rollouts abandoned midway); at most once a minute."""
        now = time.monotonic()
        if now - self._swept < _SWEEP_EVERY_S:
            return
        self._swept = now
        for key in [k for k, s in self._sessions.items() if now - s.last_used > self.session_idle_s]:
            session = self._sessions.pop(key)
            if self.closes_cookie_sessions:
                closing = asyncio.ensure_future(self._close(session))
                self._background.add(closing)  # keep a reference until it is done
                closing.add_done_callback(self._background.discard)

    async def _post(self, path: str, payload: Any, session: _Session) -> tuple[int, bytes]:
        status, body, cookies = await asgi_post(self.app, path, orjson.dumps(payload), session.cookies, session.data)
        session.cookies.update(cookies)
        return status, body


async def asgi_post(
    app: Any, path: str, body: bytes, cookies: dict[str, str], session: dict[str, Any] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """POST `body` (JSON) to an ASGI app in this process: `(status, response body, cookies it set)`.

    `session` is the request's `request.session` (what Starlette's session middleware would have decoded from
    the session cookie), the same dict from call to call of one rollout.
    """
    headers = [
        (b"host", b"nemo-gym.local"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if cookies:
        headers.append((b"cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": ("nemo-gym.local", 80),
    }
    if session is not None:
        scope["session"] = session
    answered = asyncio.Event()
    request_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the client "disconnects" only once the whole response is in
        return {"type": "http.disconnect"}

    status = 500
    set_cookies: dict[str, str] = {}
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", []):
                if name.lower() == b"set-cookie":
                    cookie_name, _, rest = value.decode().partition("=")
                    set_cookies[cookie_name] = rest.split(";", 1)[0]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                answered.set()

    try:
        await app(scope, receive, send)
    finally:
        answered.set()
    return status, b"".join(chunks), set_cookies


def _build(server: str, config: dict[str, Any], endpoints: dict[str, str]) -> tuple[Any, Any]:
    """The server object and its app, as NeMo Gym's `run_webserver` builds them, minus uvicorn and the head server.

    What `run_webserver` adds after `setup_webserver` and is kept: the liveness
    routes and the validation handler. Its exception middleware (an HTTP
    middleware: ~0.4 ms of CPU per call here, a quarter of a call's cost) is
    replaced by the host's handling of what it handles, with the same answers
    (`NemoGymServer._tool_failure`). Its session middleware pair is replaced by
    the host's session dicts (see the module docstring). Left out: uvicorn,
    telemetry, profiling, MCP exposure, ulimits.
    """
    with _contained(catalog.server_dir(server)):
        from fastapi.exceptions import RequestValidationError
        from nemo_gym.config_types import BaseServerConfig
        from nemo_gym.server_utils import ServerClient, _validation_exception_handler
        from omegaconf import OmegaConf

        module = importlib.import_module(f"resources_servers.{server}.{catalog.entrypoint(server).stem}")
    cls = getattr(module, catalog.server_class_name(server))
    config_cls = cls.model_fields["config"].annotation
    fields = set(config_cls.model_fields)
    unknown = sorted(set(config) - fields)
    if unknown:
        raise EnvError(
            f"NeMo Gym server `{server}` has no config field {', '.join(f'`{k}`' for k in unknown)}; "
            f"its fields: {', '.join(sorted(fields - _ADDRESS_FIELDS))}"
        )
    shipped = {k: v for k, v in catalog.server_config_defaults(server).items() if k in fields}
    values = {**shipped, **config, "name": server, "host": "127.0.0.1", "port": 0}
    values.setdefault("entrypoint", catalog.entrypoint(server).name)
    try:
        server_config = config_cls.model_validate(values)
    except Exception as e:
        raise EnvError(f"NeMo Gym server `{server}`: its config does not validate: {e}") from e
    global_config = _global_config(endpoints)
    _give_process_global_config(global_config)
    client = ServerClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=0),  # never contacted
        global_config_dict=OmegaConf.create(global_config),
    )
    try:
        instance = cls(config=server_config, server_client=client)
        app = instance.setup_webserver()
    except ModuleNotFoundError as e:  # some servers import their packages only when they start
        raise catalog.not_installed(catalog.server_dir(server), [_top_module(e)]) from e
    app.user_middleware = [m for m in app.user_middleware if not _carries_session_cookie(m)]
    instance.setup_liveness(app)
    app.exception_handler(RequestValidationError)(_validation_exception_handler)
    return app, instance


def _carries_session_cookie(middleware: Any) -> bool:
    """NeMo Gym's session middleware pair: Starlette's signed session cookie, and `add_session_id` (an HTTP
    middleware) naming the session. In process, the host hands each call its session dict instead
    (`asgi_post(session=...)`), with the id `add_session_id` would give it: the server sees the same
    `request.session`, without a signed cookie to encode and decode and an HTTP middleware's task group per call.
    """
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.middleware.sessions import SessionMiddleware

    if middleware.cls is SessionMiddleware:
        return True
    dispatch = middleware.kwargs.get("dispatch")
    return middleware.cls is BaseHTTPMiddleware and getattr(dispatch, "__name__", "") == "add_session_id"


_ADDRESS_FIELDS = {"name", "host", "port", "entrypoint", "num_workers"}


def _global_config(endpoints: dict[str, str]) -> dict[str, Any]:
    """NeMo Gym's global config as its `ServerClient` reads it: server name → `{host, port}`, three levels down.

    A server that calls another NeMo Gym server by name (an LLM judge: a model
    server's `/v1/responses`) reaches the base URL `endpoints` gives that name.
    """
    config = {}
    for name, url in endpoints.items():
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path.strip("/"):
            raise EnvError(f"endpoint `{name}`: expected http://HOST:PORT, got `{url}`")
        config[name] = {"responses_api_models": {"endpoint": {"host": parts.hostname, "port": parts.port or 80}}}
    return config


def _give_process_global_config(global_config: dict[str, Any]) -> None:
    """Give this process NeMo Gym's global config the way its CLI gives each server process it starts one.

    Code in NeMo Gym and in servers reads it (its aiohttp client, judges,
    sandboxes); without one, the first read parses `sys.argv` as Hydra overrides
    (a Ray worker's arguments). The first server built in a process sets it.
    """
    from nemo_gym.global_config import NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME, maybe_get_global_config_dict

    if maybe_get_global_config_dict() is None:
        os.environ[NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME] = json.dumps(global_config)


def _accepts_cookie_close(cls: Any) -> bool:
    """Whether the server closes a `/run`-seeded session on `POST /close_session` with an empty body."""
    body = inspect.signature(cls.close_resources_session).parameters.get("body")
    return body is not None and body.default is not inspect.Parameter.empty


@contextlib.contextmanager
def _contained(server_dir: Any) -> Iterator[None]:
    """Import NeMo Gym and a server, then put back what `import nemo_gym` changes process-wide.

    It rewrites `sys.path` (its roots first, the working directory and
    site-packages last), replaces `builtins.print` with an always-flushing one,
    and sets `TOKENIZERS_PARALLELISM`, `HF_HOME` and `HF_DATASETS_CACHE` (to a
    `cache/` folder in the working directory). Servers import sibling modules by
    bare name, so the server's folder is on `sys.path` while it is imported; some
    read NeMo Gym's global config at import, which parses `sys.argv` as Hydra
    overrides, so the import sees no arguments.
    """
    path, argv, printer, environ = list(sys.path), list(sys.argv), builtins.print, dict(os.environ)
    sys.path.insert(0, str(server_dir))
    sys.argv[1:] = []
    try:
        import nemo_gym  # noqa: F401  (its side effects happen here, and are undone below)

        yield
    except ModuleNotFoundError as e:  # imported where the deploy-time check's reading of the server cannot see
        raise catalog.not_installed(server_dir, [_top_module(e)]) from e
    except Exception as e:  # a server failing at import
        raise EnvError(f"cannot import the NeMo Gym server in {server_dir}: {type(e).__name__}: {e}") from e
    finally:
        sys.path[:] = path
        sys.argv[:] = argv
        builtins.print = printer
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)


def _top_module(e: ModuleNotFoundError) -> str:
    return (e.name or str(e)).split(".")[0]


def _with_response_defaults(response: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The episode's response with the fields a Responses object must have, where the model tier left them out.

    NeMo Gym validates `response` as an OpenAI `Response`; a replayed or
    synthetic model answers with fewer fields than the OpenAI API does.
    """
    params = row.get("responses_create_params") or {}
    defaults = {
        "id": "resp_gym_serve",
        "object": "response",
        "created_at": 0.0,
        "model": params.get("model") or "unknown",
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "tool_choice": params.get("tool_choice", "auto"),
        "tools": params.get("tools") or [],
    }
    return {**defaults, **{k: v for k, v in response.items() if v is not None or k not in defaults}}


def _excerpt(body: bytes, limit: int = 500) -> str:
    text = body.decode(errors="replace")
    return text if len(text) <= limit else text[:limit] + "..."
