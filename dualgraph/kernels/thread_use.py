"""How many threads each shared loop used: a record for finding the work that runs on one
core (``benchmarks/thread_split.py`` puts it beside the node profile).

On a loaded host wall time cannot say whether a node's kernel ran on one thread or two;
this can. While :func:`recording` is active, :func:`threads.run_rows` (and the fitted
loops that call a loop directly when it runs alone) note each call: the loop's name, the
threads it asked for, the threads its rows actually ran on (1 also where OpenBLAS's
workers backed off on a busy host), and its start and end (``time.perf_counter_ns``, the
profiler's clock). Off, it costs ``run_rows`` one test of a global.
"""
from __future__ import annotations

import contextlib
import time

# (name, asked, ran, start_ns, end_ns) of each call while recording; None when not recording
calls: list | None = None


@contextlib.contextmanager
def recording():
    """``with recording() as calls:`` the list of ``(name, asked, ran, start_ns, end_ns)``
    of every shared-loop call made meanwhile (on any thread of this process)."""
    global calls
    before, calls = calls, []
    try:
        yield calls
    finally:
        calls = before


def name_of(loop) -> str:
    """``module.loop`` for a compiled loop or a plain function."""
    fn = getattr(loop, "fn", loop)
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"


def note(loop, asked: int, ran: int, start_ns: int) -> None:
    """Record a call of ``loop`` that began at ``start_ns``, asked for ``asked`` threads
    and ran on ``ran`` (the caller checks that :data:`calls` is not None)."""
    calls.append((name_of(loop), asked, ran, start_ns, time.perf_counter_ns()))
