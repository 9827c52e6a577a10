"""``print`` while tracing.

A trace runs the function's Python once, so a ``print`` of Python values (``print(x.shape)``,
``print("step", i, file=log)``) in a whole-graph trace would print at the traced call only,
and at none of the calls its graph then serves. :func:`held_prints` holds back what a trace
prints (its text is made at the call, so a traced tensor printed is a graph break there, as
before). A whole-graph trace that printed can't be one graph: ``compile.py`` runs the
function's Python at every call from then on (as a split function does, its ops compiled),
which prints as eager does, or, where it can't split, eagerly. A trace that splits (or a
split call's) prints what it held when it ends; one that raises drops it (the call runs
again, and would print it twice).

>>> def step():
...     print("at the end")
>>> with held_prints(step) as printed:
...     step()
...     count = len(printed)
at the end
>>> count
1
"""
from __future__ import annotations

import contextlib

from .._helpers import format_site, user_site
from ..errors import CaptureError


class PythonPrint(CaptureError):
    """A whole-graph trace printed (see the module docstring)."""

    def __init__(self, location: str):
        super().__init__("print() while tracing (it would print at the traced call only)",
                         location, "Nothing to do: its Python runs at every call; move the "
                         "print out of the compiled function for a single graph.")


@contextlib.contextmanager
def held_prints(fn):
    """``print``, as the code of ``fn`` (a function or a module's forward) and the functions
    of its module name it, records ``(site, file, text)`` instead of printing; printed when
    the trace ends, unless it raises (a whole-graph trace that printed raises
    :class:`PythonPrint`). The name is put in that module's globals for the trace, not in
    ``builtins``: libraries imported meanwhile (Numba registers ``print``) keep the real
    one."""
    printed: list = []
    namespace = getattr(getattr(fn, "forward", fn), "__globals__", None)
    if namespace is None or "print" in namespace:   # (its own print, or a trace around)
        yield printed
        return

    def held(*args, sep=" ", end="\n", file=None, flush=False):
        sep, end = " " if sep is None else sep, "\n" if end is None else end
        printed.append((format_site(user_site()), file, sep.join(map(str, args)) + end))

    namespace["print"] = held
    try:
        yield printed
    finally:
        del namespace["print"]
    for _, file, text in printed:   # (not after an exception: the call runs again)
        print(text, end="", file=file)
