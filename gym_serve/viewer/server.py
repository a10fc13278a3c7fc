"""`gym-serve view`: the rollout viewer, a small aiohttp app on 127.0.0.1 rendering HTML on the server.

Pages: the task table (`/`, sortable and filterable, with the plots and the
bad lines), a task (`/task`: its rollouts side by side, and a diff of two,
`/diff`), a rollout (`/rollout/RID`: the conversation, reward, failure,
tokens, policy versions, timings, findings), the rollouts a check flagged
(`/findings`), and any text in full (`/rollout/RID/text/WHERE`, plain text).

Everything shown passes through Jinja2's autoescaping, and the pages forbid
inline scripts (Content-Security-Policy: scripts only from `/static/`), so a
`<script>` in a model's answer or a tool's output is text on the page, twice
over. There is no build step: the templates and one small script ship in the
package.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from gym_serve.analysis.health import HealthRun, rollout_sources
from gym_serve.analysis.health_checks import CHECKS, HealthOptions, RowView
from gym_serve.errors import InputError
from gym_serve.viewer import conversation, plots
from gym_serve.viewer.index import RolloutIndex, unreadable
from gym_serve.viewer.query import TaskQuery, page_of, select

__all__ = ["Indexing", "build_app", "start", "view"]

TEXT_LIMIT = 4_000
"""Characters of one text a rollout page shows; the rest is a link away."""
SIDE_LIMIT = 600
TURNS_PER_PAGE = 40
SIDE_BY_SIDE = 6
SIDE_TURNS = 12
FINDINGS_PER_PAGE = 50
HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
PROFILE = web.AppKey("profile", list)
TEMPLATES = web.AppKey("templates", jinja2.Environment)


@dataclass
class Indexing:
    """The index being built (or built): the pages wait on it, showing how far it got."""

    source: str
    total_bytes: int = 0
    done_bytes: int = 0
    index: RolloutIndex | None = None
    error: str | None = None


STATE = web.AppKey("state", Indexing)


def build_app(state: Indexing, profile: list[dict[str, Any]] | None = None) -> web.Application:
    app = web.Application(middlewares=[_headers])
    app[STATE], app[PROFILE] = state, profile or []
    app[TEMPLATES] = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    app.router.add_get("/", tasks_page)
    app.router.add_get("/task", task_page)
    app.router.add_get("/diff", diff_page)
    app.router.add_get("/rollout/{rid:\\d+}", rollout_page)
    app.router.add_get("/rollout/{rid:\\d+}/text/{where}", whole_text)
    app.router.add_get("/findings", findings_page)
    app.router.add_static("/static/", HERE / "static")
    return app


@web.middleware
async def _headers(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPNotFound:
        response = _render(request, "error.html", status=404, title="Not found", message=f"No page at {request.path}.")
    except _StillIndexing as e:
        response = _render(request, "indexing.html", status=503, state=e.state)
        response.headers["Retry-After"] = "1"
    except _NotFound as e:
        response = _render(request, "error.html", status=404, title="Not found", message=str(e))
    except web.HTTPException:
        raise
    except Exception as e:  # a row the pages cannot draw: say which and why, on the page, and go on serving
        logging.getLogger(__name__).exception("viewer: %s failed", request.path_qs)
        message = f"{request.path_qs} failed: {type(e).__name__}: {e}"
        response = _render(request, "error.html", status=500, title="This page failed", message=message)
    response.headers.update(SECURITY_HEADERS)
    return response


class _NotFound(Exception):
    """Raised by a page asked for something the file does not hold."""


class _StillIndexing(Exception):
    """Raised by a page asked for before the index is built."""

    def __init__(self, state: Indexing) -> None:
        self.state = state


def _index(request: web.Request) -> RolloutIndex:
    state = request.app[STATE]
    if state.index is None:
        raise _StillIndexing(state)
    return state.index


def _render(request: web.Request, template: str, *, status: int = 200, **context: Any) -> web.Response:
    page = request.app[TEMPLATES].get_template(template).render(source=request.app[STATE].source, **context)
    return web.Response(text=page, content_type="text/html", status=status)


def _page_number(request: web.Request) -> int:
    raw = request.query.get("page", "1")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def _rid(request: web.Request, name: str = "rid") -> int:
    raw = request.match_info.get(name) or request.query.get(name, "")
    index = _index(request)
    if not raw.isdigit() or int(raw) >= len(index):
        raise _NotFound(f"No rollout {raw!r}: this file holds rollouts 0 to {len(index) - 1}.")
    return int(raw)


def _summary(index: RolloutIndex, rid: int) -> dict[str, Any]:
    """A rollout's line in any list: who it is and what happened."""
    return {
        "rid": rid,
        **{name: index[name][rid] for name in ("agent", "task", "rollout", "reward", "failure", "masked", "turns")},
        "checks": index["checks"][rid],
        "line": index["line"][rid],
        "file": Path(index.sources[index["source"][rid]]).name,
    }


async def tasks_page(request: web.Request) -> web.Response:
    index = _index(request)
    query = TaskQuery.from_params(request.query)
    tasks = index.tasks()
    page = select(tasks, query)
    rewards = [r for r in index["reward"] if r is not None]
    counts = index.check_counts
    flagged = [(c.id, counts[c.id]["flagged"], f"/findings?check={c.id}") for c in CHECKS if counts[c.id]["flagged"]]
    return _render(
        request,
        "tasks.html",
        query=query,
        page=page,
        rollouts=len(index),
        failures=sum(1 for f in index["failure"] if f is not None),
        tasks=len(tasks),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        reward_chart=plots.histogram(rewards) if rewards else None,
        findings_chart=plots.bars(flagged, "rollouts (or tasks) flagged, per check") if flagged else None,
        checks=[c for c in CHECKS if counts[c.id]["flagged"]],
        bad_lines=index.bad_lines[:100],
        bad_total=len(index.bad_lines),
        profile=request.app[PROFILE],
        page_url=lambda n: query.url(page=n),
    )


async def task_page(request: web.Request) -> web.Response:
    index = _index(request)
    agent, raw_task = request.query.get("agent", ""), request.query.get("task", "")
    task = next((t for t in index.tasks() if t.agent == agent and str(t.task) == raw_task), None)
    if task is None:
        raise _NotFound(f"No task {raw_task!r} of agent {agent!r} in this file.")
    number = _page_number(request)
    page = page_of(task.rids, number, SIDE_BY_SIDE)
    columns = []
    for rid in page.items:
        row = index.row(rid)
        blocks = conversation.input_blocks(row, SIDE_LIMIT, partial(_text_url, rid))
        views, total = conversation.turn_views(row, SIDE_LIMIT, partial(_text_url, rid), count=SIDE_TURNS)
        columns.append({**_summary(index, rid), "blocks": blocks, "views": views, "more": total - len(views),
                        "error": row.get("error")})  # fmt: skip
    base = {"agent": agent, "task": raw_task}
    return _render(request, "task.html", task=task, page=page, columns=columns,
                   summaries=[_summary(index, rid) for rid in task.rids],
                   page_url=lambda n: f"/task?{urlencode({**base, 'page': n})}")  # fmt: skip


async def diff_page(request: web.Request) -> web.Response:
    index = _index(request)
    a, b = _rid(request, "a"), _rid(request, "b")
    lines = await asyncio.to_thread(conversation.diff, index.row(a), index.row(b))
    return _render(request, "diff.html", a=_summary(index, a), b=_summary(index, b), lines=lines,
                   changed=sum(1 for tag, _, _ in lines if tag != "equal"))  # fmt: skip


async def rollout_page(request: web.Request) -> web.Response:
    index = _index(request)
    rid = _rid(request)
    row = await asyncio.to_thread(index.row, rid)
    number = _page_number(request)
    first = (number - 1) * TURNS_PER_PAGE
    turns, total = conversation.turn_views(row, TEXT_LIMIT, lambda w: _text_url(rid, w), first=first,
                                           count=TURNS_PER_PAGE)  # fmt: skip
    findings = HealthRun().observe(row, source=index.sources[index["source"][rid]], line=index["line"][rid])
    later = [c for c in index["checks"][rid] if c not in {f.check for f in findings}]
    view = RowView.of(row, HealthOptions())
    return _render(
        request,
        "rollout.html",
        s=_summary(index, rid),
        inputs=conversation.input_blocks(row, TEXT_LIMIT, lambda w: _text_url(rid, w)) if number == 1 else [],
        turns=turns,
        turn_page=page_of(list(range(total)), number, TURNS_PER_PAGE),
        facts=_facts(row, view),
        findings=findings,
        later_checks=later,
        page_url=lambda n: f"/rollout/{rid}?page={n}",
        prev_rid=rid - 1 if rid > 0 else None,
        next_rid=rid + 1 if rid + 1 < len(index) else None,
    )


def _facts(row: dict[str, Any], view: RowView) -> dict[str, Any]:
    """The panels beside the conversation: reward, failure, tokens, policy versions, timings, the other fields."""
    response = view.response or {}
    shown = {"responses_create_params", "response", "reward", "reward_components", "_gs_timings", "error"}
    return {
        "reward": row.get("reward"),
        "components": row.get("reward_components") if isinstance(row.get("reward_components"), dict) else None,
        "failure": view.failure,
        "error": row.get("error"),
        "attempts": row.get("attempts"),
        "mask_sample": row.get("mask_sample"),
        "ended": {k: row.get(k) for k in ("terminated", "truncated") if k in row},
        "status": response.get("status"),
        "tokens": _tokens(response.get("usage")),
        "calls": len(view.bundles),
        "policy": {k: row[k] for k in ("policy_version_min", "policy_version_max", "policy_lag") if k in row},
        "timings": row.get("_gs_timings") if isinstance(row.get("_gs_timings"), dict) else None,
        "other": {
            k: json.dumps(v, indent=1, ensure_ascii=False)[:TEXT_LIMIT] for k, v in row.items() if k not in shown
        },
    }


def _tokens(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    details: dict[str, Any] = (
        usage["input_tokens_details"] if isinstance(usage.get("input_tokens_details"), dict) else {}
    )
    return {
        "input": usage.get("input_tokens"),
        "output": usage.get("output_tokens"),
        "cached": details.get("cached_tokens"),
    }


async def whole_text(request: web.Request) -> web.Response:
    index = _index(request)
    rid = _rid(request)
    row = await asyncio.to_thread(index.row, rid)
    where = request.match_info["where"]
    side, _, raw = where.partition("-")
    given = (row.get("responses_create_params") or {}).get("input")
    items = {
        "in": [{"role": "user", "content": given}] if isinstance(given, str) else list(given or []),
        "out": list((row.get("response") or {}).get("output") or []),
    }.get(side)
    if items is None or not raw.isdigit() or int(raw) >= len(items) or not isinstance(items[int(raw)], dict):
        raise _NotFound(f"Rollout {rid} has no item {where!r}.")
    text = conversation.item_text(items[int(raw)])
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


async def findings_page(request: web.Request) -> web.Response:
    index = _index(request)
    check = request.query.get("check", "")
    if check not in {c.id for c in CHECKS}:
        raise _NotFound(f"No check {check!r}; the checks are: {', '.join(c.id for c in CHECKS)}.")
    rids = [rid for rid, checks in enumerate(index["checks"]) if check in checks]
    tasks = [t for t in index.tasks() if check in index.task_checks.get((t.agent, t.task), [])]
    number = _page_number(request)
    page = page_of(rids, number, FINDINGS_PER_PAGE)
    spec = next(c for c in CHECKS if c.id == check)
    return _render(request, "findings.html", spec=spec, page=page, tasks=tasks,
                   rows=[_summary(index, rid) for rid in page.items],
                   page_url=lambda n: f"/findings?{urlencode({'check': check, 'page': n})}")  # fmt: skip


def _text_url(rid: int, where: str) -> str:
    return f"/rollout/{rid}/text/{where}"


async def start(app: web.Application, port: int = 0) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 (`port` 0: a free one); returns the runner and the address."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"


def view(rollouts_path: str, *, port: int = 0, profile: str | None = None) -> None:
    """Serve the viewer and print its address at once; index the file (unless its index is kept) meanwhile.

    Until the index is built every page says how far it got, and reloads itself.
    """
    state = Indexing(source=rollouts_path, index=RolloutIndex.kept(rollouts_path))
    if state.index is None and (why := unreadable(rollouts_path)) is not None:
        raise InputError(why, source=rollouts_path)
    app = build_app(state, _profile(rollouts_path, profile))

    async def serve() -> None:
        runner, url = await start(app, port)
        print(f"Serving the rollout viewer at {url} (Ctrl-C to stop)", flush=True)
        try:
            await _indexed(state, rollouts_path)
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())


async def _indexed(state: Indexing, rollouts_path: str) -> None:
    started = time.perf_counter()
    if state.index is None:
        state.total_bytes = sum(path.stat().st_size for path in rollout_sources(rollouts_path))
        print(f"Indexing {state.total_bytes / 1e6:,.1f} MB (kept beside the file for the next start)...", flush=True)

        def progress(done: int) -> None:
            state.done_bytes = done

        try:
            state.index = await asyncio.to_thread(RolloutIndex.open, rollouts_path, progress=progress)
        except Exception as e:  # shown on every page, and here
            state.error = f"{type(e).__name__}: {e}"
            print(f"gym-serve: error: indexing failed: {state.error}", file=sys.stderr, flush=True)
            return
    index = state.index
    took = time.perf_counter() - started
    bad = f"; {len(index.bad_lines)} bad line(s) listed on the page" if index.bad_lines else ""
    print(f"Indexed {len(index):,} rollouts ({len(index.tasks()):,} tasks) in {took:.1f} s{bad}", flush=True)


def _profile(rollouts_path: str, given: str | None) -> list[dict[str, Any]]:
    """The per-agent key metrics of `gym-serve profile` (`<rollouts>_aggregate_metrics.json`), if there are any."""
    from gym_serve.collect.job import sibling_path

    path = Path(given) if given else sibling_path(rollouts_path, "aggregate_metrics.json")
    if not path.is_file():
        if given:
            raise InputError("cannot open: no such file", source=given)
        return []
    try:
        agents = json.loads(path.read_text())
        return [{"agent": a["agent_ref"]["name"], "metrics": dict(a["key_metrics"])} for a in agents]
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(
            f"not a profile's aggregate metrics (`gym-serve profile` writes <rollouts>_aggregate_metrics.json): {e}",
            source=str(path),
        ) from None
