"""Where a hosted NeMo Gym server's (or agent's) calls to other servers go: to gym-serve's tiers, never over HTTP.

NeMo Gym servers reach each other by name: `ServerClient.post(server_name="judge_model", url_path="/v1/responses")`
looks the name up in NeMo Gym's global config and sends an HTTP request. A hosted server gets a `ServerClient`
whose requests go through `Routes` instead:

- a *model* name (`policy_model`, `judge_model`, `genrm_model`, ...) goes to a `ModelCall`: a Responses request
  in, a Responses response out, which is how every Model tier is called (a Serve handle in a deployment, the
  replay model in-process). `/v1/chat/completions` is converted both ways (`gym_serve.wire.chat`);
- any other name goes to an `AppCall`: an in-process app (the agent itself, or a resources server hosted beside
  it) or the Environment tier's handle;
- a name the routes lack fails the call at once (`UnroutedServerError`), naming the names there are, rather than
  NeMo Gym's client retrying a connection that cannot exist.

The answer is a `LocalResponse`: the part of aiohttp's `ClientResponse` that NeMo Gym's code reads (`status`,
`ok`, `cookies`, `read`, `json`, `content.read`, `raise_for_status`).

A model call that fails is recorded in the current *call scope* (`scope()`), a context variable the host opens
around each request it makes to the hosted app: a verify during which a judge call failed is `judge_failed`,
whatever the server made of the failure (some catch it and score 0).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.cookies import Morsel, SimpleCookie
from typing import Any

import orjson

from gym_serve.errors import EnvError
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat
from gym_serve.wire.responses import with_response_defaults

__all__ = [
    "AppCall",
    "LocalResponse",
    "ModelCall",
    "Routes",
    "UnroutedServerError",
    "failed_model_calls",
    "plain_cookies",
    "routed_server_client",
    "scope",
]

ModelCall = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""A Model tier: a Responses request → a Responses response (raises when the tier fails)."""

AppCall = Callable[[str, str, bytes, dict[str, str]], Awaitable[tuple[int, bytes, dict[str, str]]]]
"""A server: `(method, path, JSON body, cookies)` → `(status, body, cookies it set)`."""

MODEL_PATHS = ("/v1/responses", "/v1/chat/completions")


class UnroutedServerError(EnvError):
    """Raised when a hosted NeMo Gym server or agent calls a server name its application does not route."""


@dataclass
class Routes:
    """Server name → how a hosted server's calls to it are answered (see the module docstring)."""

    models: dict[str, ModelCall] = field(default_factory=dict)
    apps: dict[str, AppCall] = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted({*self.models, *self.apps})

    async def request(self, server: str, method: str, path: str, payload: Any, cookies: Mapping[str, Any]) -> Any:
        """The answer of `server` to one call, as a `LocalResponse`."""
        model = self.models.get(server)
        if model is not None:
            return await _model_request(server, model, path, payload)
        app = self.apps.get(server)
        if app is None:
            raise UnroutedServerError(
                f"the hosted NeMo Gym code called server `{server}` ({method} {path}), which this application does "
                f"not have; it routes: {', '.join(f'`{n}`' for n in self.names()) or 'nothing'}"
            )
        body = orjson.dumps(payload) if payload is not None else b""
        status, raw, set_cookies = await app(method, path, body, plain_cookies(cookies))
        return LocalResponse(status, raw, set_cookies, url=f"http://{server}{path}", method=method)


async def _model_request(server: str, model: ModelCall, path: str, payload: Any) -> LocalResponse:
    url = f"http://{server}{path}"
    route = "/" + path.split("/v1/", 1)[-1] if "/v1/" in path else path  # a rollout prefix may come first
    if route not in ("/responses", "/chat/completions"):
        body = orjson.dumps({"detail": f"`{server}` is a gym-serve Model tier: it answers {', '.join(MODEL_PATHS)}"})
        return LocalResponse(404, body, {}, url=url, method="POST")
    request = chat_request_to_responses(payload) if route == "/chat/completions" else dict(payload)
    try:
        response = await model(request)
    except Exception as e:
        _record(e)
        raise
    response = with_response_defaults(response, request)
    answer = responses_response_to_chat(response) if route == "/chat/completions" else response
    return LocalResponse(200, orjson.dumps(answer), {}, url=url, method="POST")


def routed_server_client(routes: Routes, global_config: dict[str, Any]) -> Any:
    """A NeMo Gym `ServerClient` whose calls to the names in `routes` are answered by them (in this process);
    a name only `global_config` has (an `endpoints` entry) is called over HTTP, as NeMo Gym would."""
    from nemo_gym.config_types import BaseServerConfig
    from omegaconf import OmegaConf

    client = _routed_client_class()(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=0),  # never contacted
        global_config_dict=OmegaConf.create(global_config),
    )
    client._routes = routes
    return client


@functools.cache
def _routed_client_class() -> type:
    from nemo_gym.server_utils import ServerClient
    from pydantic import BaseModel, PrivateAttr

    class RoutedServerClient(ServerClient):
        """NeMo Gym's `ServerClient`, its requests answered by `Routes` (`gym_serve.environment.nemo_gym.routes`)."""

        _routes: Routes = PrivateAttr(default_factory=Routes)

        async def request(self, server_name: str, url_path: str, method: str, **kwargs: Any) -> Any:
            if server_name in self.global_config_dict and server_name not in self._routes.names():
                return await super().request(server_name=server_name, url_path=url_path, method=method, **kwargs)
            payload = kwargs.get("json")
            if isinstance(payload, BaseModel):  # as NeMo Gym's own client sends it
                payload = payload.model_dump(exclude_unset=True)
            return await self._routes.request(server_name, method, url_path, payload, kwargs.get("cookies") or {})

    return RoutedServerClient


_failures: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar(
    "gym_serve_nemo_gym_failures", default=None
)


@contextlib.contextmanager
def scope() -> Iterator[list[BaseException]]:
    """Collect the model calls that fail inside this block (and the tasks it starts): the list it yields."""
    failures: list[BaseException] = []
    token = _failures.set(failures)
    try:
        yield failures
    finally:
        _failures.reset(token)


def failed_model_calls() -> list[BaseException]:
    """The model calls that failed so far in the current scope."""
    return list(_failures.get() or [])


def _record(e: BaseException) -> None:
    failures = _failures.get()
    if failures is not None:
        failures.append(e)


def plain_cookies(cookies: Mapping[str, Any] | None) -> dict[str, str]:
    """Cookies as NeMo Gym's code passes them on (plain values, or the `Morsel`s of an aiohttp cookie jar)."""
    return {str(k): v.value if isinstance(v, Morsel) else str(v) for k, v in (cookies or {}).items()}


class _Content:
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def read(self, n: int = -1) -> bytes:
        return self._body


class LocalResponse:
    """An in-process answer with the interface NeMo Gym's code reads from aiohttp's `ClientResponse`."""

    def __init__(self, status: int, body: bytes, cookies: dict[str, str], *, url: str, method: str) -> None:
        self.status = status
        self.reason = "OK" if status < 400 else "Error"
        self._body = body
        self.cookies: SimpleCookie = SimpleCookie()
        for name, value in cookies.items():
            self.cookies[name] = value
        self.content = _Content(body)
        self.url = url
        self.method = method
        self.headers = {"Content-Type": "application/json"}
        self.history = ()

    @property
    def ok(self) -> bool:
        return self.status < 400

    @property
    def request_info(self) -> Any:
        from aiohttp import RequestInfo
        from multidict import CIMultiDict, CIMultiDictProxy
        from yarl import URL

        return RequestInfo(URL(self.url), self.method, CIMultiDictProxy(CIMultiDict()), URL(self.url))

    async def read(self) -> bytes:
        return self._body

    async def text(self, encoding: str | None = None) -> str:
        return self._body.decode(encoding or "utf-8", errors="replace")

    async def json(self, **_: Any) -> Any:
        return orjson.loads(self._body) if self._body else None

    def raise_for_status(self) -> None:
        if not self.ok:
            from aiohttp import ClientResponseError

            raise ClientResponseError(self.request_info, (), status=self.status, message=self.reason)

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None
