"""``to_static``: convert Python control flow on tensors into graph control flow, then
capture the function like ``dg.compile``.

The function's source is parsed, transformed (``transformers.py``: one transformer per
construct) and compiled again with the user's file name and line numbers, so errors,
tracebacks and graph node locations name the user's own lines. ``.code`` shows the converted
source and ``.origin(line)`` maps one of its lines back to the user's line.

>>> import dualgraph as dg
>>> from dualgraph.capture.ast import to_static
>>> @to_static
... def f(x):
...     if x.sum() > 0:
...         x = x * 2
...     return x
>>> f(dg.tensor([1.0, 2.0]))
tensor([2., 4.])
"""
from __future__ import annotations

import ast
import inspect
import os
import textwrap
import types

from ..compile import Compiled, is_module
from . import runtime
from .transformers import (BlockConverter, ConditionTransformer, JumpTransformer, Names,
                           RangeTransformer, ReturnTransformer)

__all__ = ["to_static", "StaticFunction", "convert"]


class Converted:
    """A converted function: the new function, its source and the line map."""

    def __init__(self, fn, source: str, origin: dict, filename: str):
        self.fn = fn
        self.source = source
        self.origin = origin        # line of `source` -> line of the user's file
        self.filename = filename


def convert(fn) -> Converted:
    """Convert ``fn``'s control flow (see the module docstring); raises ``TypeError`` when
    its source is unavailable (builtins, lambdas typed at a prompt)."""
    fn = inspect.unwrap(fn)
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise TypeError(f"to_static needs the source of {fn!r}: {e}") from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise TypeError(f"to_static converts functions defined with `def`, not {fn!r}")
    fdef.decorator_list = []
    transform(fdef, os.path.basename(filename))
    ast.fix_missing_locations(fdef)
    new_fn = _build(fdef, fn, filename)
    source = ast.unparse(fdef)
    return Converted(new_fn, source, _line_map(fdef, source), filename)


def transform(fdef: ast.FunctionDef, filename: str) -> None:
    """Apply the transformers to ``fdef`` and the functions nested in it, in place."""
    names = Names()
    functions = [n for n in ast.walk(fdef) if isinstance(n, ast.FunctionDef)]
    for f in functions:
        ReturnTransformer().apply(f)
    RangeTransformer(names).visit(fdef)
    for f in functions:
        f.body = JumpTransformer(names).apply(f.body)
    ConditionTransformer().visit(fdef)
    BlockConverter(names, filename).function(fdef)


def _build(fdef: ast.FunctionDef, fn, filename: str):
    """Compile ``fdef`` as a closure over ``fn``'s cells (and ``_jst``, the runtime)."""
    freevars = list(fn.__code__.co_freevars)
    factory = ast.FunctionDef(
        name="_jst_factory", args=ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=n) for n in ["_jst"] + freevars],
            vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    namespace: dict = {}
    exec(compile(module, filename, "exec"), namespace)
    code = next(c for c in namespace["_jst_factory"].__code__.co_consts
                if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    cells = dict(zip(freevars, fn.__closure__ or ()))
    cells["_jst"] = types.CellType(runtime)
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[n] for n in code.co_freevars))
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return new


def _line_map(fdef: ast.FunctionDef, source: str) -> dict:
    """Line of the converted source -> the user's line: the unparsed source parses back to
    the same tree, so walking both side by side pairs their nodes."""
    origin: dict = {}
    for new, old in zip(ast.walk(ast.parse(source).body[0]), ast.walk(fdef)):
        if isinstance(new, ast.stmt) and hasattr(old, "lineno"):
            origin.setdefault(new.lineno, old.lineno)
    return origin


class StaticFunction(Compiled):
    """What ``to_static`` returns: a ``dg.compile`` callable running the converted function;
    ``.code`` is the converted source, ``.origin(line)`` its line map, ``.graph`` and
    ``.explain()`` as for ``dg.compile``."""

    def __init__(self, fn, **options):
        self.converted = convert(type(fn).forward if is_module(fn) else fn)
        if is_module(fn):   # the module runs its converted forward from now on
            fn.forward = types.MethodType(self.converted.fn, fn)
            super().__init__(fn, **options)
        else:
            super().__init__(self.converted.fn, **options)
        self.dygraph_function = fn

    @property
    def code(self) -> str:
        return self.converted.source

    def origin(self, line: int) -> int:
        """The user's line for ``line`` (1-based) of ``.code``."""
        return self.converted.origin[line]


def to_static(fn=None, *, fullgraph=False, check=False, dynamic=None):
    """Convert ``fn``'s (a function's or a module's ``forward``) ``if`` / ``while`` /
    ``for`` on tensors into ``dg.cond`` / ``dg.while_loop`` / ``dg.scan`` and capture it as
    ``dg.compile`` does. Control flow on Python values stays Python. Usable as a decorator.
    """
    if fn is None:
        return lambda f: to_static(f, fullgraph=fullgraph, check=check, dynamic=dynamic)
    return StaticFunction(fn, fullgraph=fullgraph, check=check, dynamic=dynamic)
