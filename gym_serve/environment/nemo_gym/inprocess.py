"""NeMo Gym's FastAPI apps (resources servers, agents) built and called in this process: no uvicorn, no network.

`build` makes a server object and its app as NeMo Gym's `run_webserver` does,
minus uvicorn and the head server; `asgi_post` calls the app through ASGI.

Importing `nemo_gym` changes the importing process (it rewrites `sys.path`,
replaces `print`, sets Hugging Face cache variables); `contained` imports it and
a server's module, then puts back what the import changed.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gym_serve.environment.nemo_gym import catalog
from gym_serve.environment.nemo_gym.routes import Routes, routed_server_client
from gym_serve.errors import EnvError

__all__ = ["Built", "asgi_post", "build", "excerpt"]

_ADDRESS_FIELDS = {"name", "host", "port", "entrypoint", "num_workers"}

Built = tuple[Any, Any]
"""`(app, server object)`."""


def build(
    folder: Path,
    instance: str,
    config: dict[str, Any],
    *,
    defaults: dict[str, Any],
    routes: Routes,
    endpoints: dict[str, str],
    keep_sessions: bool = False,
) -> Built:
    """The server object and its app, for the NeMo Gym server (or agent) in `folder`.

    `instance` is the server's name (what other servers call it by), `config`
    its config fields over `defaults` (what NeMo Gym ships for it). What
    `run_webserver` adds after `setup_webserver` and is kept: the liveness
    routes and the validation handler. Its exception middleware is left out (an
    exception reaches the caller, who answers as the middleware would), and so
    is its session middleware pair unless `keep_sessions` (the host hands each
    call its session instead, see `gym_serve.environment.nemo_gym.host`). Left
    out: uvicorn, telemetry, profiling, MCP exposure, ulimits.
    """
    with contained(folder):
        from fastapi.exceptions import RequestValidationError
        from nemo_gym.server_utils import _validation_exception_handler

        entry = catalog.entrypoint_of(folder)
        module = importlib.import_module(catalog.module_of(folder))
    cls = getattr(module, catalog.class_name_of(entry))
    config_cls = cls.model_fields["config"].annotation
    fields = set(config_cls.model_fields)
    unknown = sorted(set(config) - fields)
    if unknown:
        raise EnvError(
            f"NeMo Gym server `{folder.name}` has no config field {', '.join(f'`{k}`' for k in unknown)}; "
            f"its fields: {', '.join(sorted(fields - _ADDRESS_FIELDS))}"
        )
    shipped = {k: v for k, v in defaults.items() if k in fields}
    values = {**shipped, **config, "name": instance, "host": "127.0.0.1", "port": 0}
    values.setdefault("entrypoint", entry.name)
    try:
        server_config = config_cls.model_validate(values)
    except Exception as e:
        raise EnvError(f"NeMo Gym server `{folder.name}`: its config does not validate: {e}") from e
    global_config = _global_config(endpoints)
    _give_process_global_config(global_config)
    client = routed_server_client(routes, global_config)
    try:
        server = cls(config=server_config, server_client=client)
        app = server.setup_webserver()
    except ModuleNotFoundError as e:  # some servers import their packages only when they start
        raise catalog.not_installed(folder, [_top_module(e)]) from e
    if not keep_sessions:
        app.user_middleware = [m for m in app.user_middleware if not _carries_session_cookie(m)]
    server.setup_liveness(app)
    app.exception_handler(RequestValidationError)(_validation_exception_handler)
    return app, server


async def asgi_post(
    app: Any, path: str, body: bytes, cookies: dict[str, str], session: dict[str, Any] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    """POST `body` (JSON) to an ASGI app in this process: `(status, response body, cookies it set)`.

    `session` is the request's `request.session` (what Starlette's session middleware would have decoded from
    the session cookie), the same dict from call to call of one rollout. An exception the app raises (a route
    that failed: NeMo Gym's exception middleware is left out) reaches the caller.
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


def _global_config(endpoints: dict[str, str]) -> dict[str, Any]:
    """NeMo Gym's global config as its `ServerClient` reads it: server name → `{host, port}`, three levels down.

    A server that calls another NeMo Gym server by a name `endpoints` gives reaches
    that base URL over HTTP (names routed to gym-serve's tiers never use it).
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


@contextlib.contextmanager
def contained(folder: Path) -> Iterator[None]:
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
    sys.path.insert(0, str(folder))
    sys.argv[1:] = []
    try:
        import nemo_gym  # noqa: F401  (its side effects happen here, and are undone below)

        yield
    except ModuleNotFoundError as e:  # imported where the deploy-time check's reading of the server cannot see
        raise catalog.not_installed(folder, [_top_module(e)]) from e
    except EnvError:
        raise
    except Exception as e:  # a server failing at import
        raise EnvError(f"cannot import the NeMo Gym server in {folder}: {type(e).__name__}: {e}") from e
    finally:
        sys.path[:] = path
        sys.argv[:] = argv
        builtins.print = printer
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)


def _top_module(e: ModuleNotFoundError) -> str:
    return (e.name or str(e)).split(".")[0]


def excerpt(body: bytes, limit: int = 500) -> str:
    text = body.decode(errors="replace")
    return text if len(text) <= limit else text[:limit] + "..."
