"""What a profile recorded, as torch.profiler shows it: events, their averages, a table and
a Chrome trace.

The profiler appends one raw record per timed interval, ``(name, kind, start_ns, end_ns,
thread, input_shapes, bytes, stack)``; :func:`build_events` turns them into
:class:`FunctionEvent` objects nested by time (an op inside a ``record_function`` range, a
compiled node inside its program), from which each event's *self* time is its time less
its children's. Times are in microseconds, as torch's are.

>>> raw = [("outer", "range", 0, 10_000, 1, None, 0, ()),
...        ("mul", "op", 2_000, 6_000, 1, [[3], []], 12, ("model.py:3",))]
>>> outer, mul = build_events(raw, 0)
>>> outer.cpu_time_total, outer.self_cpu_time_total, mul.cpu_parent is outer
(10.0, 6.0, True)
"""
from __future__ import annotations

import json
import os

from .._helpers import short_location, write_atomic

# raw kinds -> Chrome trace categories (Perfetto colours and filters by them)
CATEGORIES = {"op": "cpu_op", "node": "compiled_node", "program": "compiled_program",
              "range": "user_annotation"}
SORT_KEYS = ("self_cpu_time_total", "cpu_time_total", "cpu_time", "count",
             "cpu_memory_usage", "self_cpu_memory_usage")


class FunctionEvent:
    """One timed interval: an eager op (``kind`` "op"), a node of a compiled program
    ("node"), the program's run ("program") or a ``record_function`` range ("range")."""

    count = 1

    def __init__(self, name, kind, start_ns, end_ns, thread, input_shapes, nbytes, stack,
                 base_ns):
        self.name = self.key = name
        self.kind = kind
        self.thread = thread
        self.start_us = (start_ns - base_ns) / 1000
        self.end_us = (end_ns - base_ns) / 1000
        self.input_shapes = input_shapes
        self.stack = list(stack)
        self.self_cpu_memory_usage = nbytes
        self.cpu_memory_usage = nbytes   # children's added by build_events
        self.cpu_parent = None
        self.cpu_children: list[FunctionEvent] = []

    @property
    def cpu_time_total(self) -> float:
        return self.end_us - self.start_us

    cpu_time = cpu_time_total

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    def __repr__(self):
        return (f"<FunctionEvent {self.name} ({self.kind}) {self.cpu_time_total:.1f}us "
                f"shapes={self.input_shapes}>")


def build_events(raw, base_ns: int) -> "EventList":
    """The events of ``raw`` records, in start order, each linked to its parent (the
    innermost event of its thread that contains it) and children."""
    events = [FunctionEvent(*r, base_ns) for r in raw]
    events.sort(key=lambda e: (e.thread, e.start_us, -e.end_us))
    open_: list[FunctionEvent] = []
    for e in events:
        while open_ and not (open_[-1].thread == e.thread and e.end_us <= open_[-1].end_us):
            open_.pop()
        if open_:
            e.cpu_parent = open_[-1]
            open_[-1].cpu_children.append(e)
        open_.append(e)
    for e in reversed(events):   # children before parents: totals of memory bottom up
        if e.cpu_parent is not None:
            e.cpu_parent.cpu_memory_usage += e.cpu_memory_usage
    events.sort(key=lambda e: e.start_us)
    return EventList(events)


class FunctionEventAvg:
    """The events of one key (name, and input shapes or stack when grouped by them)
    summed: ``count``, ``cpu_time_total``, ``self_cpu_time_total``, ``cpu_time`` (the
    mean), memory."""

    def __init__(self, first: FunctionEvent, group_by_shape: bool, stack_n: int):
        self.key = first.name
        self.kind = first.kind
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.input_shapes = first.input_shapes if group_by_shape else None
        self.stack = first.stack[:stack_n] if stack_n else []

    def add(self, e: FunctionEvent) -> None:
        self.count += 1
        self.cpu_time_total += e.cpu_time_total
        self.self_cpu_time_total += e.self_cpu_time_total
        self.cpu_memory_usage += e.cpu_memory_usage
        self.self_cpu_memory_usage += e.self_cpu_memory_usage

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg {self.key} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.1f}us>")


class EventList(list):
    """A list of events or averages with torch's ``table``; ``wall_us`` is the wall time
    the profiler recorded for (0 when unknown)."""

    wall_us = 0.0

    @property
    def self_cpu_time_total(self) -> float:
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape: bool = False,
                     group_by_stack_n: int = 0) -> "EventList":
        groups: dict = {}
        for e in self:
            key = (e.name, str(e.input_shapes) if group_by_input_shape else None,
                   tuple(e.stack[:group_by_stack_n]))
            if key not in groups:
                groups[key] = FunctionEventAvg(e, group_by_input_shape, group_by_stack_n)
            groups[key].add(e)
        out = EventList(groups.values())
        out.wall_us = self.wall_us
        return out

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_name_column_width: int = 55, header: str | None = None) -> str:
        """The events as torch.profiler's table: one row each, sorted by ``sort_by``
        (descending: one of ``SORT_KEYS``), at most ``row_limit`` rows (-1: all)."""
        return format_table(self, sort_by, row_limit, max_name_column_width, header)

    def export_chrome_trace(self, path, pid: int | None = None) -> None:
        write_atomic(path, chrome_trace(self, pid).encode())


def format_time(us: float) -> str:
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f}s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_bytes(n: int) -> str:
    for unit, size in (("Gb", 1 << 30), ("Mb", 1 << 20), ("Kb", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} b"


def format_table(events, sort_by, row_limit, name_width, header) -> str:
    wall = getattr(events, "wall_us", 0)
    self_total = sum(e.self_cpu_time_total for e in events)   # (rows left out included)
    if sort_by is not None:
        if sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by={sort_by!r}: dualgraph profiles the CPU only; sort "
                             f"by one of {', '.join(SORT_KEYS)}")
        events = sorted(events, key=lambda e: getattr(e, sort_by), reverse=True)
    if row_limit is not None and row_limit >= 0:
        events = events[:row_limit]
    memory = any(e.cpu_memory_usage for e in events)
    shapes = any(e.input_shapes is not None for e in events)
    stacks = any(e.stack for e in events)
    heads = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    heads += ["CPU Mem", "Self CPU Mem"] if memory else []
    heads += ["# of Calls"]
    heads += ["Input Shapes"] if shapes else []
    heads += ["Source Location"] if stacks else []
    rows = []
    for e in events:
        row = [_clip(e.key, name_width),
               _percent(e.self_cpu_time_total, self_total), format_time(e.self_cpu_time_total),
               _percent(e.cpu_time_total, self_total), format_time(e.cpu_time_total),
               format_time(e.cpu_time)]
        row += [format_bytes(e.cpu_memory_usage),
                format_bytes(e.self_cpu_memory_usage)] if memory else []
        row += [str(e.count)]
        row += [_clip(str(e.input_shapes), 45) if e.input_shapes is not None else ""
                ] if shapes else []
        row += [", ".join(short_location(s) for s in e.stack)] if stacks else []
        rows.append(row)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    rule = "  ".join("-" * w for w in widths)

    def line(cells):   # names and text columns to the left, numbers to the right
        return "  ".join(c.ljust(w) if i == 0 or h in ("Input Shapes", "Source Location")
                         else c.rjust(w) for i, (c, w, h) in enumerate(zip(cells, widths,
                                                                            heads))).rstrip()
    out = [header] if header else []
    out += [rule, line(heads), rule] + [line(r) for r in rows] + [rule]
    footer = f"Self CPU time total: {format_time(self_total)}"
    if wall:
        footer += f"  (wall time recorded: {format_time(wall)})"
    return "\n".join(out + [footer]) + "\n"


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def chrome_trace(events, pid: int | None = None) -> str:
    """The events as Chrome's trace-event JSON (complete "X" events, times in
    microseconds), which chrome://tracing and https://ui.perfetto.dev open."""
    pid = os.getpid() if pid is None else pid
    trace = []
    for e in events:
        args = {}
        if e.input_shapes is not None:
            args["Input Dims"] = e.input_shapes
        if e.self_cpu_memory_usage:
            args["Bytes"] = e.self_cpu_memory_usage
        if e.stack:
            args["Source"] = e.stack[0]
        trace.append({"name": e.name, "cat": CATEGORIES[e.kind], "ph": "X",
                      "ts": round(e.start_us, 3), "dur": round(e.cpu_time_total, 3),
                      "pid": pid, "tid": e.thread, "args": args})
    # one event a line: small, and a reader can grep it
    return ('{"displayTimeUnit": "ms", "otherData": {"producer": "dualgraph"},\n'
            '"traceEvents": [\n' + ",\n".join(json.dumps(t) for t in trace) + "\n]}\n")
