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

Servers it calls. A server that calls another by name (a judge model,
`judge_model_server: {name: judge_model}`) reaches what `routes` gives that
name (`gym_serve.environment.nemo_gym.routes`): in a deployment, a Model-tier
application through its handle. A verify during which such a model call
failed is `judge_failed`, whatever the server made of the failure.

NeMo Gym's own agents (`gym_serve.environment.nemo_gym.agents`) call the server
over its HTTP protocol instead: `http` answers one such call, the rollout's
session named by a cookie the host sets at `/seed_session` (or `/reset`).

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

Gymnasium-style servers (`/reset`, `/step`) are hosted by `GymnasiumHost`
(`gym_serve.environment.nemo_gym.gymnasium`); `hosted_server` picks the host a
server needs.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from gym_serve.environment.nemo_gym import catalog
from gym_serve.environment.nemo_gym.inprocess import asgi_post, build, excerpt
from gym_serve.environment.nemo_gym.routes import Routes, scope
from gym_serve.environment.runner import EnvInfo
from gym_serve.errors import EnvError, JudgeError, SessionLostError, VerifierTimeoutError, VerifyError
from gym_serve.wire.responses import with_response_defaults

__all__ = ["SESSION_COOKIE", "NemoGymServer", "hosted_server"]

log = logging.getLogger(__name__)

PROTOCOL_ROUTES = frozenset({"seed_session", "close_session", "verify", "aggregate_metrics", "reverify_mode"})
"""The server's own routes: never reachable as a tool."""

NOT_FOUND = '{"detail":"Not Found"}'
"""What an unknown tool answers (FastAPI's 404 body), and what a protocol route called as a tool gets."""

SESSION_COOKIE = "_gs_session"
"""The cookie naming a rollout's session in calls over the server's HTTP protocol (`NemoGymServer.http`)."""

SESSION_STARTS = frozenset({"/seed_session", "/reset"})
SESSION_ENDS = frozenset({"/verify", "/close"})

_SWEEP_EVERY_S = 60.0


def hosted_server(server: str, config: dict[str, Any] | None = None, **options: Any) -> NemoGymServer:
    """The host `server` needs: `GymnasiumHost` for a Gymnasium-style server, else `NemoGymServer`."""
    if catalog.is_gymnasium(server):
        from gym_serve.environment.nemo_gym.gymnasium import GymnasiumHost

        return GymnasiumHost(server, config, **options)
    return NemoGymServer(server, config, **options)


@dataclass
class _Session:
    data: dict[str, Any]  # the server's `request.session`
    cookies: dict[str, str] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    episode: dict[str, Any] = field(default_factory=dict)  # what a Gymnasium host keeps of the episode


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
        routes: Routes | None = None,
    ) -> None:
        for warning in catalog.check_server(server):
            log.warning("%s", warning)
        self.name = server
        self.verify_timeout_s = verify_timeout_s
        self.session_idle_s = session_idle_s
        self.routes = routes or Routes()
        self.app, self.server = build(
            catalog.server_dir(server),
            server,
            config or {},
            defaults=catalog.server_config_defaults(server),
            routes=self.routes,
            endpoints=endpoints or {},
        )
        from nemo_gym.server_utils import SESSION_ID_KEY  # imported by `build`

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
        session = self._new_session()
        try:
            status, body = await self._post("/seed_session", row, session)
        except Exception as e:
            raise EnvError(f"NeMo Gym server `{self.name}`: /seed_session raised {type(e).__name__}: {e}") from e
        if not 200 <= status < 300:
            raise EnvError(f"NeMo Gym server `{self.name}`: /seed_session answered {status}: {excerpt(body)}")
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
            except (ValueError, TypeError, RecursionError) as e:  # simple_agent crashes on a huge number, deep nesting
                text = json.dumps({"error": f"Invalid tool call arguments: {e!r}"})
            else:
                text = NOT_FOUND if name in PROTOCOL_ROUTES else await self._tool(name, arguments, session)
            outputs.append({"type": "function_call_output", "call_id": call.get("call_id", ""), "output": text})
        return outputs, state

    async def user_turn(
        self, row: dict[str, Any], response: dict[str, Any], state: Any
    ) -> tuple[dict[str, Any] | None, Any]:
        raise EnvError(f"NeMo Gym server `{self.name}` has no user turn")  # describe() says so: never called

    async def verify(self, row: dict[str, Any], response: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """`POST /verify` with the row plus `response`; the verify JSON, less the echoed request, is the verdict."""
        session = self._session(state)
        body = {**row, "response": with_response_defaults(response, row.get("responses_create_params") or {})}
        try:
            status, raw = await self._verify_call(body, session)
        finally:
            await self._end(state["session"])
        if not 200 <= status < 300:
            raise VerifyError(f"NeMo Gym server `{self.name}`: /verify answered {status}: {excerpt(raw)}")
        return self.verdict(raw)

    def verdict(self, raw: bytes) -> dict[str, Any]:
        """The rollout's verdict from a 2xx verify answer; one without a reward, or marked by NeMo Gym's judge
        failsafe (`_ng_failure_class`), fails the rollout."""
        verdict = orjson.loads(raw)
        if not isinstance(verdict, dict) or not isinstance(verdict.get("reward"), int | float):
            raise VerifyError(f"NeMo Gym server `{self.name}`: /verify answered no reward: {excerpt(raw)}")
        if verdict.get("_ng_failure_class"):
            raise JudgeError(
                f"NeMo Gym server `{self.name}`: {verdict['_ng_failure_class']}: "
                f"{verdict.get('failure_reason') or verdict.get('_ng_failure_judge_error')}"
            )
        for echoed in ("responses_create_params", "response"):
            verdict.pop(echoed, None)
        return verdict

    async def _verify_call(self, body: dict[str, Any], session: _Session) -> tuple[int, bytes]:
        """`POST /verify` within our deadline; a model call (a judge) that failed under it is `judge_failed`."""
        with scope() as failed:
            call = asyncio.ensure_future(self._post("/verify", body, session))
        try:
            done, _ = await asyncio.wait({call}, timeout=self.verify_timeout_s)
            if not done:
                self._abandon(call)
                raise VerifierTimeoutError(
                    f"NeMo Gym server `{self.name}`: /verify did not answer within {self.verify_timeout_s:g} s "
                    f"(a judge it calls may be down: NeMo Gym retries a refused connection forever)"
                )
            answer = call.result()
        except VerifyError:
            raise
        except Exception as e:
            if failed:
                raise self._judge_failed(failed) from e
            raise VerifyError(f"NeMo Gym server `{self.name}`: /verify raised {type(e).__name__}: {e}") from e
        if failed:
            raise self._judge_failed(failed)
        return answer

    def _judge_failed(self, failed: list[BaseException]) -> JudgeError:
        first = failed[0]
        return JudgeError(
            f"NeMo Gym server `{self.name}`: judge_failed: {len(failed)} model call(s) of its verify failed, "
            f"the first with {type(first).__name__}: {first}"
        )

    async def http(self, path: str, body: bytes, cookies: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """One call of a NeMo Gym agent to the server, over its HTTP protocol: `(status, body, cookies)`.

        `/seed_session` (or a Gymnasium `/reset`) starts a session and names it in
        the `SESSION_COOKIE` it sets; later calls carrying that cookie run in that
        session, which `/verify` (or `/close`) ends. Each answer within the session
        sets the cookie again, as Starlette's session middleware does under NeMo Gym
        (some agents carry on with only the cookies of the last answer). An exception answers 500 with
        its repr, as NeMo Gym's exception middleware does; a verify whose judge call
        failed raises `JudgeError` (the agent's rollout fails `judge_failed`).
        """
        self._sweep()
        if path in SESSION_STARTS:
            key, session = uuid.uuid4().hex, self._new_session()
        elif SESSION_COOKIE in cookies:
            key = cookies[SESSION_COOKIE]
            session = self._session({"session": key})
        else:
            key, session = None, self._new_session()  # a call outside any rollout (e.g. /aggregate_metrics)
        payload = orjson.loads(body) if body else {}
        try:
            if path == "/verify":
                status, raw = await self._verify_call(payload, session)
            else:
                status, raw = await self._post(path, payload, session)
        except (JudgeError, VerifierTimeoutError):
            await self._end_http(key, path)
            raise
        except Exception as e:
            status, raw = 500, self._tool_failure(path.lstrip("/"), e).encode()
        set_cookies = {}
        if path in SESSION_STARTS and 200 <= status < 300 and key is not None:
            self._sessions[key] = session
            set_cookies[SESSION_COOKIE] = key
        elif key is not None and (path in SESSION_ENDS or self.ends_session(path, raw)):
            await self._end_http(key, path)
        elif key in self._sessions:  # as NeMo Gym's session middleware sets its cookie again on every answer:
            set_cookies[SESSION_COOKIE] = key  # an agent may keep only the last answer's cookies
        return status, raw, set_cookies

    def ends_session(self, path: str, raw: bytes) -> bool:
        """Whether an answer over the HTTP protocol ends its rollout's session (besides `/verify` and `/close`)."""
        return False

    async def _end_http(self, key: str | None, path: str) -> None:
        if key is not None:
            await self._end(key)

    def _new_session(self) -> _Session:
        return _Session({self._session_id_key: str(uuid.uuid4())})  # as NeMo Gym's session middleware names it

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


def _accepts_cookie_close(cls: Any) -> bool:
    """Whether the server closes a `/run`-seeded session on `POST /close_session` with an empty body."""
    body = inspect.signature(cls.close_resources_session).parameters.get("body")
    return body is not None and body.default is not inspect.Parameter.empty
