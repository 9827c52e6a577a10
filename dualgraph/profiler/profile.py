"""The profiler: times eager ops, compiled programs node by node, and ``record_function``
ranges, shaped like ``torch.profiler``.

Two hooks feed it, both idle unless a profile records. ``dispatch.apply`` hands every op to
:meth:`profile.op` while ``dispatch.profiler`` is set (one global test per op otherwise),
and an ``Executable`` hands its run to :meth:`profile.program`, which runs the copy of the
generated code that calls back after each node (``Executable.run_timed``): a node's time
is the time from the previous callback's return to its own call, so the callbacks' cost
is in no node's time. A fused group is one node, named after the ops it fuses.
"""
from __future__ import annotations

import contextlib
import copy
import enum
import os
import socket
import threading
import time
import warnings

import numpy as np

from .. import dispatch
from .._helpers import user_stack
from ..dispatch import modes
from ..graph import Value
from ..ops.fused import FUSED
from ..tensor import Tensor
from .events import EventList, build_events

_now = time.perf_counter_ns
_tid = threading.get_ident
STACK_DEPTH = 8   # user frames kept per event with with_stack=True


class ProfilerActivity(enum.Enum):
    """What to profile: ``CPU`` (dualgraph runs on the CPU only; ``CUDA`` is accepted for
    torch scripts and ignored with a warning)."""
    CPU = "cpu"
    CUDA = "cuda"


class ProfilerAction(enum.Enum):
    """What a schedule says to do at a step."""
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0):
    """A schedule as torch.profiler's: skip ``skip_first`` steps, then cycles of ``wait``
    idle steps, ``warmup`` steps and ``active`` recorded steps, ``repeat`` times (0:
    forever); ``on_trace_ready`` is called at the end of each cycle.

    >>> s = schedule(wait=1, warmup=1, active=2, repeat=1)
    >>> [s(i).name for i in range(5)]
    ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE', 'NONE']
    """
    if min(wait, warmup, repeat, skip_first) < 0 or active < 1:
        raise ValueError(f"schedule(wait={wait}, warmup={warmup}, active={active}, "
                         f"repeat={repeat}, skip_first={skip_first}): active must be at "
                         "least 1 and the others at least 0")
    cycle = wait + warmup + active

    def schedule_fn(step: int) -> ProfilerAction:
        step -= skip_first
        if step < 0 or (repeat and step >= repeat * cycle):
            return ProfilerAction.NONE
        k = step % cycle
        if k < wait:
            return ProfilerAction.NONE
        if k < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if k < cycle - 1 else ProfilerAction.RECORD_AND_SAVE
    return schedule_fn


def _always(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


_active: list = []   # the profile that records now (at most one)


class profile:
    """Record what runs inside ``with profile(...) as prof:`` (or between ``start()`` and
    ``stop()``): eager ops, compiled programs and their nodes (fused kernels included),
    ``record_function`` ranges. ``record_shapes`` keeps the input shapes,
    ``profile_memory`` the bytes of the arrays each op or node allocates, ``with_stack``
    the user's source lines (a compiled node's: where it was traced). With ``schedule``,
    call ``prof.step()`` once per step; ``on_trace_ready(prof)`` is called when a cycle's
    recording ends (and at exit while recording).

    >>> import dualgraph as dg
    >>> from dualgraph.profiler import profile, record_function
    >>> with profile(record_shapes=True) as prof:
    ...     with record_function("forward"):
    ...         y = (dg.ones(4, 4) @ dg.ones(4, 4)).sum()
    >>> [(e.key, e.count) for e in prof.key_averages()]
    [('forward', 1), ('matmul', 1), ('sum', 1)]
    >>> print(prof.key_averages().table(sort_by="cpu_time_total"))   # doctest: +SKIP
    """

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes: bool = False, profile_memory: bool = False,
                 with_stack: bool = False):
        activities = set(activities or [ProfilerActivity.CPU])
        if ProfilerActivity.CUDA in activities:
            warnings.warn("dualgraph runs on the CPU only: ProfilerActivity.CUDA is ignored",
                          stacklevel=2)
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.schedule = schedule or _always
        self.record_steps = schedule is not None   # ProfilerStep#N ranges, as torch's
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = ProfilerAction.NONE
        self._raw: list = []
        self._base = None   # perf_counter_ns of the first recording: the trace's zero
        self._wall_ns = 0
        self._since = 0
        self._step_start = None
        self._events = None
        # a compiled node -> its (name, shapes, stack); an Executable -> its program's name
        self._names: dict = {}

    # -- the torch API ----------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        self.step_num = 0
        self.current_action = self.schedule(0)
        if self.current_action in _RECORDING:
            self._begin()

    def stop(self) -> None:
        if self._recording():
            self._finish()
        self.current_action = ProfilerAction.NONE

    def step(self) -> None:
        """Mark the end of a step: the schedule decides whether the next one records."""
        before, recording = self.current_action, self._recording()
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if recording:
            if before is ProfilerAction.RECORD_AND_SAVE or \
                    self.current_action not in _RECORDING:
                self._finish()
            else:
                self._close_step()
                self._open_step()
        if self.current_action in _RECORDING and not self._recording():
            self._begin()

    def events(self) -> EventList:
        """Every event of the last recording (so far, while it records), in start order
        (``FunctionEvent``s)."""
        if self._events is None or self._recording():
            self._events = build_events(self._raw, self._base or 0)
            wall = self._wall_ns + (_now() - self._since if self._recording() else 0)
            self._events.wall_us = wall / 1000
        return self._events

    def key_averages(self, group_by_input_shape: bool = False,
                     group_by_stack_n: int = 0) -> EventList:
        """The events summed per name (and input shapes, and the first ``group_by_stack_n``
        source lines): ``.table(sort_by=..., row_limit=...)`` prints them."""
        if group_by_input_shape and not self.record_shapes:
            raise ValueError("group_by_input_shape needs profile(record_shapes=True)")
        if group_by_stack_n and not self.with_stack:
            raise ValueError("group_by_stack_n needs profile(with_stack=True)")
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_name_column_width: int = 55, header: str | None = None) -> str:
        """Every event in a row of its own, as ``torch.autograd.profiler.profile.table``
        prints them; ``key_averages().table(...)`` sums them per name instead."""
        return self.events().table(sort_by, row_limit, max_name_column_width, header)

    def export_chrome_trace(self, path) -> None:
        """Write the events to ``path`` as a Chrome trace (JSON; open it in
        https://ui.perfetto.dev or chrome://tracing), atomically."""
        self.events().export_chrome_trace(path)

    # -- recording --------------------------------------------------------------------------
    def _recording(self) -> bool:
        return bool(_active) and _active[0] is self

    def _begin(self) -> None:
        if _active or dispatch.profiler is not None:
            raise RuntimeError("another dg.profiler.profile is recording: profiles do not "
                               "nest; record one region with record_function instead")
        self._raw, self._events, self._wall_ns = [], None, 0
        self._since = _now()
        if self._base is None:
            self._base = self._since
        _active.append(self)
        dispatch.profiler = self
        self._open_step()

    def _finish(self) -> None:
        self._close_step()
        dispatch.profiler = None
        _active.clear()
        self._wall_ns += _now() - self._since
        self._events = None
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def _open_step(self) -> None:
        if self.record_steps:
            self._step_start = (f"ProfilerStep#{self.step_num}", _now())

    def _close_step(self) -> None:
        if self._step_start is not None:
            name, start = self._step_start
            self._raw.append((name, "range", start, _now(), _tid(), None, 0, ()))
            self._step_start = None

    def op(self, op, args, attrs):
        """Run ``op`` through ``dispatch.apply`` and record its time (dispatch's hook)."""
        dispatch.profiler = None   # so that apply runs the op itself
        try:
            if modes.tracer is not None:   # tracing builds a graph: no op runs
                return dispatch.apply(op, *args, **attrs)
            start = _now()
            out = dispatch.apply(op, *args, **attrs)
            end = _now()
        finally:
            dispatch.profiler = self
        shapes = [list(a.shape) if isinstance(a, Tensor) else [] for a in args] \
            if self.record_shapes else None
        nbytes = 0
        if self.profile_memory and not op.view:
            ins = [a._data for a in args if isinstance(a, Tensor)]
            outs = out if isinstance(out, tuple) else (out,)
            nbytes = sum(t._data.nbytes for t in outs if t._data.base is None
                         and not any(t._data is a for a in ins))
        stack = user_stack(STACK_DEPTH) if self.with_stack else ()
        self._raw.append((op.name, "op", start, end, _tid(), shapes, nbytes, stack))
        return out

    def program(self, exe, arrays) -> list:
        """Run the Executable ``exe`` on ``arrays`` through its timed code, recording the
        program and each of its nodes (the Executable's hook)."""
        exe.timed_code()   # (generated before the clock starts)
        raw, tid, memory = self._raw, _tid(), self.profile_memory
        donated, names = exe.donated, self._names
        last = [_now()]

        def on_node(node, outs):
            end = _now()
            facts = names.get(node)
            if facts is None:
                facts = names[node] = self._node_facts(node)
            nbytes = 0
            if memory:   # fresh arrays: a buffer's or a donated input's are views or reused
                nbytes = sum(a.nbytes for v, a in zip(node.outputs, outs)
                             if type(a) is np.ndarray and a.base is None and v not in donated)
            raw.append((facts[0], "node", last[0], end, tid, facts[1], nbytes, facts[2]))
            last[0] = _now()

        start = last[0]
        outs = exe.run_timed(arrays, on_node)
        end = _now()
        shapes = [list(a.shape) for a in arrays] if self.record_shapes else None
        raw.append((self._program_name(exe), "program", start, end, tid, shapes, 0, ()))
        return outs

    def _node_facts(self, node) -> tuple:
        name = node.op.name
        if node.op is FUSED:
            ops = list(dict.fromkeys(n.op.name for n in node.attrs["graph"].nodes))
            name = f"fused({','.join(ops[:6])}{',...' if len(ops) > 6 else ''})"
        shapes = [[str(d) for d in x.shape] if isinstance(x, Value) else []
                  for x in node.inputs] if self.record_shapes else None
        if shapes is not None:   # static dims as ints, symbolic ones by name
            shapes = [[int(d) if d.isdigit() else d for d in s] for s in shapes]
        stack = (node.location,) if self.with_stack and node.location else ()
        return "compiled::" + name, shapes, stack

    def _program_name(self, exe) -> str:
        name = self._names.get(exe)
        if name is None:
            where = next((n.location for n in exe.graph.nodes if n.location), None)
            name = "compiled graph" + (f" at {os.path.basename(where)}" if where else "")
            self._names[exe] = name
        return name

    def add_range(self, name: str, start: int, end: int) -> None:
        """Record a range from ``start`` to ``end`` (``time.perf_counter_ns``):
        ``record_function``'s, and compiling's (``dg.compile`` reports it)."""
        stack = user_stack(STACK_DEPTH) if self.with_stack else ()
        self._raw.append((name, "range", start, end, _tid(), None, 0, stack))


class record_function(contextlib.ContextDecorator):
    """A named range in the profile, around a block (``with record_function("loss"):``)
    or a function (``@record_function("forward")``); ranges nest, and the ops inside are
    its children in the table and the trace. Costs nothing when no profile records.

    >>> import dualgraph as dg
    >>> with dg.profiler.profile() as prof:
    ...     with record_function("outer"):
    ...         with record_function("inner"):
    ...             _ = dg.ones(2) + 1
    >>> [(e.name, e.cpu_parent.name if e.cpu_parent else None) for e in prof.events()]
    [('outer', None), ('inner', 'outer'), ('add', 'inner')]
    """

    def __init__(self, name: str):
        self.name = name
        self._start = None

    def _recreate_cm(self):   # a decorated function's calls may overlap (recursion)
        return copy.copy(self)

    def __enter__(self):
        self._prof = _active[0] if _active else None
        self._start = _now()
        return self

    def __exit__(self, *exc):
        end = _now()
        if self._prof is not None and _active and _active[0] is self._prof:
            self._prof.add_range(self.name, self._start, end)
        return False


def tensorboard_trace_handler(dir_name, worker_name: str | None = None, use_gzip=False):
    """An ``on_trace_ready`` that writes each cycle's Chrome trace into ``dir_name`` as
    ``<worker>.<nanoseconds>.pt.trace.json`` (the names TensorBoard's profiler plugin
    reads), as torch's does."""
    if use_gzip:
        raise ValueError("tensorboard_trace_handler: use_gzip is not supported")
    worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"

    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        stamp = time.time_ns()   # (two cycles may end within a millisecond)
        prof.export_chrome_trace(os.path.join(dir_name, f"{worker}.{stamp}.pt.trace.json"))
    return handler
