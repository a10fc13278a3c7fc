"""An instant OpenAI-compatible model server for the weather task: a stand-in model for HTTP benchmarks.

It answers `POST /v1/responses` and `POST /v1/chat/completions` the way a
perfect policy for `example_single_tool_call` would, and at once: the first
turn calls `get_weather` for the city the user asked about (or asks which city,
when the question names none), the turn after a tool output answers with the
tool's own weather description. No model, no waiting, so a benchmark that talks
to it measures the caller's HTTP path, not a model. It runs in its own process
so that its CPU can be counted apart from the system under test.

    python -m gym_serve.testing.instant_openai_server --port 0
    http://127.0.0.1:41873/v1          <- first line on stdout: the OpenAI `base_url`

From Python, `start_instant_server()` starts it as a subprocess and returns
`(base_url, process)`; terminate the process when done. Any API key is
accepted. Responses are built as plain dicts and serialized with orjson, so
the server costs little CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import select
import subprocess
import sys
import time
from typing import Any

import orjson
from aiohttp import web

from gym_serve.wire.pieces import assistant_message, input_items, usage

__all__ = ["city_of", "instant_app", "start_instant_server"]

_ALIASES = {"sf": "San Francisco", "nyc": "New York", "la": "Los Angeles"}
_CITY = re.compile(r"\bin ((?:[A-Z][\w'-]*)(?: [A-Z][\w'-]*)*)")
_ids = itertools.count()


def city_of(question: str) -> str | None:
    """The city a weather question names, if any.

    >>> city_of("should I bring an umbrella in Seattle today?"), city_of("what's it like in sf?")
    ('Seattle', 'San Francisco')
    >>> city_of("how's the outside?") is None
    True
    """
    for word in re.findall(r"[a-z]+", question.lower()):
        if word in _ALIASES:
            return _ALIASES[word]
    match = _CITY.search(question)
    return match.group(1) if match else None


def _answer(tool_output: str) -> str:
    """The final answer: the tool's own weather description, which the weather verifier rewards."""
    try:
        return f"{orjson.loads(tool_output)['weather_description']} Dress for it and have a good time!"
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"The weather service said: {tool_output}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


# ---- the two APIs ----------------------------------------------------------------------------------------------


async def _responses(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    items = input_items(body.get("input") or [])
    outputs = [item for item in items if item.get("type") == "function_call_output"]
    n = next(_ids)
    if outputs:
        item: dict[str, Any] = _message(n, _answer(_text(outputs[-1].get("output"))))
    else:
        question = next((_text(i.get("content")) for i in reversed(items) if i.get("role") == "user"), "")
        city = city_of(question)
        if city is None:
            item = _message(n, "Which city are you in? Tell me and I'll check the weather there.")
        else:
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": "get_weather",
                "arguments": orjson.dumps({"city": city}).decode(),
                "status": "completed",
            }
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
    messages = body.get("messages") or []
    tool_messages = [m for m in messages if m.get("role") == "tool"]
    n = next(_ids)
    finish = "stop"
    if tool_messages:
        message: dict[str, Any] = {"role": "assistant", "content": _answer(_text(tool_messages[-1].get("content")))}
    else:
        question = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        city = city_of(question)
        if city is None:
            message = {"role": "assistant", "content": "Which city are you in? Tell me and I'll check the weather."}
        else:
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "get_weather", "arguments": orjson.dumps({"city": city}).decode()},
            }
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
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


def _message(n: int, text: str) -> dict[str, Any]:
    return assistant_message(text, f"msg_{n}")


def _usage() -> dict[str, Any]:
    return usage(64, 16)


def _json(payload: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(payload), content_type="application/json")


async def _models(request: web.Request) -> web.Response:
    return _json({"object": "list", "data": [{"id": "instant", "object": "model", "owned_by": "gym-serve"}]})


def instant_app() -> web.Application:
    """The aiohttp application (for running it in a process of your own)."""
    app = web.Application()
    app.router.add_post("/v1/responses", _responses)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_get("/v1/models", _models)
    return app


# ---- running it --------------------------------------------------------------------------------------------------


async def _serve(host: str, port: int) -> None:
    runner = web.AppRunner(instant_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp keeps the socket here
    print(f"http://{host}:{bound}/v1", flush=True)
    await asyncio.Event().wait()


def start_instant_server(*, host: str = "127.0.0.1", timeout_s: float = 30.0) -> tuple[str, subprocess.Popen[str]]:
    """Start the server in a subprocess on a free port; returns `(base_url, process)`. Terminate it when done."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gym_serve.testing.instant_openai_server", "--host", host, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
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
    args = parser.parse_args()
    try:
        asyncio.run(_serve(args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
