"""``dg.jit``: tracing into static functions, and (soon) AST conversion of control flow."""
from __future__ import annotations

from .capture.ast import to_static  # noqa: F401
from .capture.compile import Compiled
from .capture.inspect import inspect  # noqa: F401
from .dispatch import modes


def trace(fn_or_module, example_inputs, *, check=False):
    """Trace ``fn_or_module`` once on ``example_inputs`` (a tensor or a tuple of them) and
    return a static function with ``.graph``; calling it with inputs of another signature
    is an error (``dg.compile`` retraces instead). ``traced.graph.save(path)`` writes the
    graph with the tensors it reads (parameters, closure tensors) as constants, so that
    ``dg.graph.load(path)`` runs with the tensor arguments only (docs/capture.md).

    >>> import dualgraph as dg
    >>> f = dg.jit.trace(lambda x: x * 2, dg.ones(3))
    >>> print(f.graph)   # doctest: +SKIP
    """
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    traced = Compiled(fn_or_module, check=check, fullgraph=True, strict=True)
    traced(*example_inputs)
    return traced


def is_scripting() -> bool:
    """False: dualgraph has no TorchScript (models test it to skip script-only paths)."""
    return False


def is_tracing() -> bool:
    """Whether a graph is being captured now (``dg.compile``, ``dg.jit.trace``), as torch's
    is True inside ``torch.jit.trace``."""
    return modes.building_graph()


def ignore(fn=None, **kwargs):
    """``@dg.jit.ignore`` / ``@dg.jit.unused``: the function itself (nothing is scripted)."""
    return fn if fn is not None else (lambda f: f)


unused = ignore
