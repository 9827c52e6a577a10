"""The compile worker's side of ``worker.py``: a process that imports Numba once and answers
requests to compile a loop's entry (``native.compile_and_store``), one JSON line each. A
module of its own because it needs ``native.py``, which asks ``worker.py`` to send work here.
"""
from __future__ import annotations

import json
import os
import select
import sys
from pathlib import Path

from .cache import GENERATED, import_file
from .worker import IDLE_S


def serve() -> None:
    """The worker's main loop: answer requests from stdin until it closes or stays idle
    for ``DUALGRAPH_COMPILE_WORKER_IDLE_S`` seconds."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)     # anything else printed (Numba, LLVM) goes to stderr, not the answers
    idle_s = float(os.environ.get("DUALGRAPH_COMPILE_WORKER_IDLE_S", IDLE_S))
    try:
        from . import build   # noqa: F401  (Numba's import, before the first request)
    except ImportError:
        pass                  # (each request reports it)
    while select.select([sys.stdin], [], [], idle_s)[0]:
        line = sys.stdin.readline()
        if not line:
            return
        answers.write(json.dumps(_answer(json.loads(line))) + "\n")


def _answer(request: dict) -> dict:
    from . import native
    try:
        loop = getattr(_module(request["module"], request["file"]), request["name"])
        native.compile_and_store(loop, tuple(request["codes"]), Path(request["folder"]),
                                 request["key"])
    except native.NumbaBroken as e:
        return {"error": str(e), "numba_broken": True}
    except Exception as e:   # reported to the user's process, which decides what to do
        return {"error": f"{type(e).__name__}: {e}"}
    return {"ok": True}


def _module(name: str, file: str):
    """The module holding a loop: imported by name, or a generated kernel from its file."""
    import importlib
    if name in sys.modules or not name.startswith(GENERATED):
        return importlib.import_module(name)
    return import_file(name, file)
