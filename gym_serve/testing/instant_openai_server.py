"""An instant OpenAI-compatible model server: a stand-in model for HTTP benchmarks, tests and chaos soaks.

It answers `POST /v1/responses` and `POST /v1/chat/completions` the way a
deterministic policy for three tasks would, and at once
(`gym_serve.testing.instant_policy`: the weather task's tool call and answer,
a multiple-choice letter, a support conversation with a simulated user). No
model, no waiting, so a benchmark that talks to it measures the caller's HTTP
path, not a model. It runs in its own process so that its CPU can be counted
apart from the system under test.

    python -m gym_serve.testing.instant_openai_server --port 0
    http://127.0.0.1:41873/v1          <- first line on stdout: the OpenAI `base_url`

With `--faults '{"http_5xx": 0.02, "drop": 0.01, ...}'` (and `--seed`) it also
injects faults at those rates: 5xx, 429 with `Retry-After`, calls that hang past
the client's timeout, dropped connections, malformed bodies and slow answers
(`gym_serve.testing.faults`); `GET /faults` counts them, `PUT /faults` changes
the rates.

From Python, `start_instant_server()` starts it as a subprocess and returns
`(base_url, process)`; terminate the process when done. Any API key is
accepted. Responses are built as plain dicts and serialized with orjson, so
the server costs little CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import select
import subprocess
import sys
import time
from typing import Any

import orjson
from aiohttp import web

from gym_serve.testing.faults import FaultRates, Faults
from gym_serve.testing.instant_policy import city_of, respond, text_of
from gym_serve.wire.pieces import input_items, usage

__all__ = ["city_of", "instant_app", "start_instant_server"]

_ids = itertools.count()


# ---- the two APIs ----------------------------------------------------------------------------------------------


async def _responses(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    n = next(_ids)
    item = respond(input_items(body.get("input") or []), body.get("instructions"), n=n)
    return _json(
        {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "instant"),
            "status": "completed",
            "output": [item],
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "usage": _usage(),
        }
    )


async def _chat_completions(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    n = next(_ids)
    item = respond(_chat_items(body.get("messages") or []), n=n)
    finish = "stop"
    if item["type"] == "function_call":
        call = {"id": item["call_id"], "type": "function", "function": {k: item[k] for k in ("name", "arguments")}}
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": text_of(item["content"])}
    usage = _usage()
    return _json(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "instant"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
            },
        }
    )


def _chat_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the policy reads a conversation: messages, and tool results as tool outputs."""
    return [
        {"type": "function_call_output", "output": m.get("content")}
        if m.get("role") == "tool"
        else {"type": "message", "role": m.get("role"), "content": m.get("content")}
        for m in messages
    ]


def _usage() -> dict[str, Any]:
    return usage(64, 16)


def _json(payload: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(payload), content_type="application/json")


async def _models(request: web.Request) -> web.Response:
    return _json({"object": "list", "data": [{"id": "instant", "object": "model", "owned_by": "gym-serve"}]})


def instant_app(faults: Faults | None = None) -> web.Application:
    """The aiohttp application (for running it in a process of your own); `faults` injects faults into its calls."""
    app = web.Application(middlewares=[faults.middleware] if faults is not None else [])
    app.router.add_post("/v1/responses", _responses)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_get("/v1/models", _models)
    if faults is not None:
        faults.routes(app)
    return app


# ---- running it --------------------------------------------------------------------------------------------------


async def _serve(host: str, port: int, faults: Faults | None) -> None:
    runner = web.AppRunner(instant_app(faults), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp keeps the socket here
    print(f"http://{host}:{bound}/v1", flush=True)
    await asyncio.Event().wait()


def start_instant_server(
    *, host: str = "127.0.0.1", timeout_s: float = 30.0, faults: FaultRates | None = None, seed: int = 0
) -> tuple[str, subprocess.Popen[str]]:
    """Start the server in a subprocess on a free port; returns `(base_url, process)`. Terminate it when done.

    With `faults`, it injects them at those rates (seeded by `seed`), and serves `GET`/`PUT /faults`.
    """
    command = [sys.executable, "-m", "gym_serve.testing.instant_openai_server", "--host", host, "--port", "0"]
    if faults is not None:
        command += ["--faults", faults.model_dump_json(), "--seed", str(seed)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    line = process.stdout.readline() if ready else ""  # its URL, or "" if it exited or said nothing in time
    process.stdout.close()  # it says nothing more
    if not line.startswith("http"):
        process.kill()
        raise RuntimeError(f"the instant OpenAI server did not start (exit code {process.poll()}, said {line!r})")
    return line.strip(), process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (the URL is printed first)")
    parser.add_argument(
        "--faults", help='fault rates as JSON, e.g. \'{"http_5xx": 0.02, "drop": 0.01}\' (gym_serve.testing.faults)'
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the faults' draws")
    args = parser.parse_args()
    faults = Faults(FaultRates.model_validate(json.loads(args.faults)), seed=args.seed) if args.faults else None
    try:
        asyncio.run(_serve(args.host, args.port, faults))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
