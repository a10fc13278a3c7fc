"""The untrusted side of the code sandbox: runs the solution, and answers the harness's calls into it.

Started by the harness as `python -I -B -c <this file> MODE`, confined (see `gym_serve.sandbox._confine`).
Nothing here is trusted: the solution shares this interpreter and may rewrite any of it. That is
fine by design: the tests, the expected values and the result channel are in the harness, a
separate process; all the solution can change here is what it answers, which is what the harness
judges. Standard library only.

- mode `stdio`: runs `solution.py` as `__main__` (stdin and stdout are the test case's).
- mode `serve REQUESTS_FD REPLIES_FD PACKAGE`: runs `solution.py` as `__main__` (or, with a PACKAGE,
  imports that package from the working directory), then answers requests (one JSON line each) with
  replies: the names it defined, and calls, attribute reads, item reads, `len`, iteration and `str`
  on them (`in` is decided by the harness, over the items); a request may name a module of the
  package (`$m`). Values cross as plain data (`encode`); anything else stays here and crosses as a
  handle the harness can only pass back.
"""

import base64
import builtins
import importlib
import json
import math
import os
import sys


def _run_stdio():
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    with open("solution.py") as f:
        source = f.read()
    exec(compile(source, "solution.py", "exec"), namespace)


class _Handles:
    def __init__(self):
        self.objects = {}

    def put(self, obj):
        key = len(self.objects) + 1
        self.objects[key] = obj
        return {"$h": key}


def encode(value, handles, depth=0):
    """Plain data as tagged JSON (exact builtin types only: a subclass is an object, so it stays here)."""
    kind = type(value)
    if depth > 100:
        raise ValueError("nested too deeply")
    if kind is int and value.bit_length() > 12000:
        return {"$i": hex(value)}  # a long decimal would take the harness quadratic time to convert
    if value is None or kind is bool or kind is str or kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$f": repr(value)}
    if kind is list:
        return [encode(v, handles, depth + 1) for v in value]
    if kind is tuple:
        return {"$t": [encode(v, handles, depth + 1) for v in value]}
    if kind is dict:
        return {"$d": [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        return {"$s" if kind is set else "$fs": [encode(v, handles, depth + 1) for v in value]}
    if kind is bytes or kind is bytearray:
        return {"$b" if kind is bytes else "$ba": base64.b64encode(value).decode()}
    if kind is complex:
        return {"$c": [encode(value.real, handles), encode(value.imag, handles)]}
    return handles.put(value)


def decode(value, handles):
    if isinstance(value, list):
        return [decode(v, handles) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, inner),) = value.items()
    if tag == "$h":
        return handles.objects[inner]
    if tag == "$m":
        return importlib.import_module(inner)
    if tag == "$i":
        return int(inner, 16)
    if tag == "$f":
        return float(inner)
    if tag == "$t":
        return tuple(decode(v, handles) for v in inner)
    if tag == "$d":
        return {decode(k, handles): decode(v, handles) for k, v in inner}
    if tag in ("$s", "$fs"):
        items = [decode(v, handles) for v in inner]
        return set(items) if tag == "$s" else frozenset(items)
    if tag in ("$b", "$ba"):
        raw = base64.b64decode(inner)
        return raw if tag == "$b" else bytearray(raw)
    if tag == "$c":
        return complex(decode(inner[0], handles), decode(inner[1], handles))
    raise ValueError(f"unknown tag {tag}")


def _describe_names(namespace, handles):
    names = {}
    for name, value in list(namespace.items()):
        if name.startswith("__") and name.endswith("__"):
            continue
        if type(value) is type(sys):  # the harness uses its own copy if the name is on its list, else this handle
            names[name] = {"module": value.__name__, "value": handles.put(value)}
        else:
            try:
                names[name] = {"value": encode(value, handles)}
            except (ValueError, RecursionError):
                names[name] = {"value": handles.put(value)}
    return names


_MUTABLE = (list, dict, set, bytearray)


def _serve(requests_fd, replies_fd, package):
    sys.set_int_max_str_digits(0)
    requests = os.fdopen(requests_fd, "r", encoding="utf-8")
    replies = os.fdopen(replies_fd, "w", encoding="utf-8")
    handles = _Handles()

    def reply(message):
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        if package:
            sys.path.insert(0, os.getcwd())
            importlib.import_module(package)
        else:
            with open("solution.py") as f:
                exec(compile(f.read(), "solution.py", "exec"), namespace)
    except BaseException as e:  # the solution failed to load: the harness fails every test
        reply({"loaded": False, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        return
    reply({"loaded": True, "names": {} if package else _describe_names(namespace, handles)})
    for line in requests:
        request = json.loads(line)
        try:
            reply({"id": request["id"], **_answer(request, handles)})
        except BaseException as e:  # the solution's exception is the answer; the harness decides what it means
            raised = {"type": type(e).__name__, "message": str(e)[:1000], "builtin": _builtin_base(type(e))}
            reply({"id": request["id"], "raise": raised})


def _builtin_base(kind):
    """The nearest builtin class an exception derives from (`ValueError` for a library's `ParseError`)."""
    return next((c.__name__ for c in kind.__mro__ if c.__module__ == "builtins"), "BaseException")


def _answer(request, handles):
    op = request["op"]
    target = decode(request["target"], handles)
    if op == "call":
        args = [decode(a, handles) for a in request["args"]]
        kwargs = {k: decode(v, handles) for k, v in request["kwargs"].items()}
        result = target(*args, **kwargs)
        after = [encode(a, handles) if type(a) in _MUTABLE else None for a in args]
        return {"ok": encode(result, handles), "args_after": after}
    if op == "getattr":
        return {"ok": encode(getattr(target, request["name"]), handles)}
    if op == "getitem":
        return {"ok": encode(target[decode(request["key"], handles)], handles)}
    if op == "len":
        return {"ok": len(target)}
    if op == "iter":
        return {"ok": handles.put(iter(target))}
    if op == "next":
        try:
            return {"ok": encode(next(target), handles)}
        except StopIteration:
            return {"stop": True}
    if op == "str":
        return {"ok": str(target)}
    if op == "repr":
        return {"ok": repr(target)}
    raise ValueError(f"unknown op {op}")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        _run_stdio()
    else:
        _serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "")
