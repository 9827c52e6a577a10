"""Compiling loops in a separate process, so that Numba never loads into the user's.

Numba and LLVM take ~80 MB that a process keeps once it has compiled anything (a compiled
GPT step peaked at 211 MB with a cold kernel cache, 131 MB with a warm one), import SciPy
and other modules the program never asked for, and a crash inside LLVM would take the
user's process with it. So ``native.py`` hands a loop to compile to a worker process: the
worker compiles the C-callable entry exactly as ``native.py`` would in-process and writes
it into the kernel cache; the user's process then loads it from there like any cached
entry (``native._load``), through llvmlite's linker only.

One worker serves a process (and is replaced in a forked child); requests are one JSON line
on its stdin, answers one JSON line on its stdout. It starts at the first compile (starting
it earlier, when code generation made a kernel module new to the cache, overlapped little
and mispredicted: a group run with an output in place of an input compiles a variant of
that module, so the unused one looked new in every process). It exits when its stdin
closes (the user's process ended) or after ``DUALGRAPH_COMPILE_WORKER_IDLE_S`` seconds (60
by default) without work, and the next compile starts a new one.
``DUALGRAPH_COMPILE_WORKER=0`` compiles in the user's process instead. Loops outside
``dualgraph.kernels`` and the generated kernel modules (which the worker could not import)
are always compiled in-process.
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from .cache import GENERATED

IDLE_S = 60.0
_PACKAGE = Path(__file__).resolve().parents[1]

# Run by the worker's interpreter: a stand-in for the dualgraph package lets it import
# ``dualgraph.kernels`` without ``dualgraph/__init__.py`` (0.2 s of imports it never uses),
# and SciPy is kept out: Numba imports ``scipy.linalg`` at its first compile (0.16 s) only
# to offer BLAS to ``np.dot`` in loops, which these loops never call. Ctrl-C in the
# terminal reaches the worker too: it ignores it (it leaves with the user's process).
_BOOTSTRAP = (
    "import sys, types\n"
    "package = types.ModuleType('dualgraph')\n"
    "package.__path__ = [sys.argv[1]]\n"
    "sys.modules['dualgraph'] = package\n"
    "sys.modules['scipy'] = None\n"
    "import signal\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "from dualgraph.kernels.server import serve\n"
    "serve()\n")


class NumbaBroken(RuntimeError):
    """Numba is installed (so the loops are used) but does not import."""


class WorkerFailed(RuntimeError):
    """The worker could not compile a loop (its error, or how it died)."""


def enabled() -> bool:
    """Loops compile in a worker: asked for, on a POSIX system, and a worker could start."""
    return (os.environ.get("DUALGRAPH_COMPILE_WORKER", "1") != "0" and os.name == "posix"
            and _cannot_start is None)


def can_compile(loop) -> bool:
    """Whether the worker can import ``loop`` by itself: a loop of ``dualgraph.kernels``
    (what its stand-in package serves) or of a generated kernel module."""
    module = loop.fn.__module__
    return enabled() and module.startswith(("dualgraph.kernels.", GENERATED))


class _Worker:
    """A running worker process and the process it serves (a forked child starts its own:
    two processes writing to one pipe would mix their requests)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, str(_PACKAGE)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1)
        self.pid = os.getpid()

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.process.poll() is None

    def ask(self, request: dict) -> dict | None:
        """The worker's answer, or None when it exited before answering. Interrupted while
        waiting (Ctrl-C), the worker is stopped: its late answer must not be read as the
        answer to the next request."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        except BaseException:
            self.process.kill()
            raise
        return json.loads(line) if line else None

    def close(self) -> None:
        """Close the pipes (a running worker then leaves) and collect the process."""
        self.process.stdin.close()
        self.process.stdout.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


_worker: _Worker | None = None
_lock = threading.Lock()
_cannot_start: str | None = None   # why no worker could start (then loops compile here)


def _running() -> _Worker:
    global _worker, _cannot_start
    if _worker is None or not _worker.alive():
        if _worker is not None and _worker.pid == os.getpid():
            _worker.close()     # (it has left: its pipes only)
        try:
            _worker = _Worker()
        except (OSError, TypeError, ValueError) as e:   # no usable sys.executable
            _cannot_start = f"{sys.executable}: {e}"
            raise WorkerFailed(f"the compile worker could not start ({_cannot_start}); "
                               "loops compile in this process from now on") from e
    return _worker


def _close() -> None:
    """At exit: close the worker's pipes, so that it leaves now (it would anyway, once the
    pipes close with this process)."""
    if _worker is not None and _worker.pid == os.getpid():
        _worker.close()


atexit.register(_close)


def compile_entry(loop, codes: tuple, folder: Path, key: str) -> None:
    """Have the worker compile ``loop``'s entry for ``codes`` into ``folder`` under
    ``key`` (the files ``native.compile_and_store`` writes). Raises
    ``NumbaBroken`` when Numba does not import there, :class:`WorkerFailed` for any
    other failure."""
    request = {"module": loop.fn.__module__, "file": loop.fn.__code__.co_filename,
               "name": loop.fn.__name__, "codes": list(codes), "folder": str(folder),
               "key": key}
    with _lock:
        current = _running()
        answer = current.ask(request)
        if answer is None and current.process.wait() == 0:   # it had just left, idle:
            current = _running()                              # ask a new one
            answer = current.ask(request)
    if answer is None:
        raise WorkerFailed(f"the compile worker exited (status {current.process.wait()}) "
                           f"while compiling {loop.__qualname__}")
    if "error" in answer:
        if answer.get("numba_broken"):
            raise NumbaBroken(answer["error"])
        raise WorkerFailed(f"compiling {loop.__qualname__} in the compile worker: "
                           f"{answer['error']}")
