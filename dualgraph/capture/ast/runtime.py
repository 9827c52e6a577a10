"""What converted code calls (as ``_jst.*``): each ``convert_*`` runs plain Python when its
condition or iterable is a Python value or an eager tensor, and builds a ``cond`` /
``while_loop`` / ``scan`` node when it is a traced tensor.

Variables flow through converted control flow explicitly: a branch or loop body is a nested
function taking the variables it may change and returning their new values. Variables not
yet bound hold an :class:`Undefined`, which raises a clear error when used. Names that
start with ``_jst_`` are the converter's own (return values and break/continue flags).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ... import _pytree as pytree
from ... import dtypes
from ...autograd.tape import grad_mode
from ...dispatch import modes
from ...errors import CaptureError
from ...graph.ir import type_str
from ...ops import control, creation, elementwise
from ...shapes import ShapedType
from ...tensor import Tensor
from .rows import row_writes, scan_with_row_writes

_NUMBERS = (bool, int, float)
# A traced `while` recorded with gradients on stops with an error after this many
# iterations: its gradient replays the loop over a fixed number of steps.
LOOP_BOUND = 1000


class ConversionError(CaptureError):
    """Control flow on a traced tensor that can't become one graph node: a variable bound
    in one branch only, or given different types by the two branches or by a loop's
    iterations. Run eagerly, Python needs no common type, so ``dg.compile`` turns this into
    a graph break (the function runs eagerly, with one warning naming the line) unless
    ``fullgraph=True``, where it raises. The message is ``reason. fix``; the reason names
    the variable and the line (``location``)."""

    def __init__(self, reason: str, location: str, fix: str):
        super().__init__(reason, location, fix)
        self.args = (f"{reason}. {fix}",)


class ConversionTypeError(ConversionError, TypeError):
    """Types that differ between branches or across iterations."""


class ConversionNameError(ConversionError, NameError):
    """A variable a traced branch or loop leaves unbound."""


@contextmanager
def _checked(what: str, where: str):
    """Report the body checks of the construct ``what`` (at ``where``) as a
    :class:`ConversionTypeError`; errors of nested constructs pass through."""
    try:
        yield
    except control.BodyMismatch as e:
        if e.what != what:
            raise
        raise ConversionTypeError(e.reason, where, e.fix) from None


class Undefined:
    """A variable the converted code has not bound yet; using it raises, naming it."""

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)

    def _fail(self, *args, **kwargs):
        raise UnboundLocalError(f"variable {self.name!r} is used before it is assigned")

    __getattr__ = __call__ = __bool__ = __iter__ = __len__ = __getitem__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __matmul__ = __neg__ = __lt__ = __gt__ = _fail
    __le__ = __ge__ = __float__ = __int__ = __index__ = _fail

    def __repr__(self):
        return f"<undefined {self.name}>"


def ld(scope: dict, name: str):
    """The variable ``name`` of ``scope`` (``locals()``), or an :class:`Undefined`."""
    return scope.get(name, Undefined(name))


def result(value):
    """A function's return ``value``; returning a variable left unbound raises, naming it."""
    for leaf in pytree.flatten(value)[0]:
        if isinstance(leaf, Undefined):
            leaf._fail()
    return value


def is_traced(x) -> bool:
    """A tensor whose value is known only when the graph runs: control flow on it becomes
    a graph node. (Every tensor is, while tracing: eager ones become graph inputs.)"""
    return modes.tracer is not None and isinstance(x, Tensor)


# -- boolean operators on conditions -----------------------------------------------------------
def not_(x):
    return elementwise.logical_not(x) if is_traced(x) else not x


def none_of(*flags):
    """``not (f1 or f2 ...)`` for break/continue flags (Python bools or traced tensors)."""
    result = not_(flags[0])
    for f in flags[1:]:
        result = and_(lambda r=result: r, lambda f=f: not_(f))
    return result


def and_(*thunks):
    """``a and b and ...`` (each operand a thunk, evaluated as Python would), with
    ``logical_and`` once an operand is a traced tensor."""
    return _bool_op(thunks, elementwise.logical_and, stop_when=False)


def or_(*thunks):
    return _bool_op(thunks, elementwise.logical_or, stop_when=True)


def _bool_op(thunks, combine, stop_when: bool):
    value = thunks[0]()
    for thunk in thunks[1:]:
        if is_traced(value):
            value = combine(value, _as_bool_tensor(thunk()))
        elif bool(value) is stop_when:
            return value
        else:
            value = thunk()
    return value


def _as_bool_tensor(x) -> Tensor:
    return x if isinstance(x, Tensor) else creation.tensor(bool(x))


# -- ranges ----------------------------------------------------------------------------------
def range_args(*args):
    """``range``'s arguments as (start, stop, step); tensors stay tensors."""
    if len(args) == 1:
        return 0, args[0], 1
    start, stop, step = (*args, 1) if len(args) == 2 else args
    return start, stop, step


def range_cond(i, stop, step):
    """Is ``i`` inside ``range(start, stop, step)``?"""
    if is_traced(step):
        return elementwise.where(step > 0, i < stop, i > stop)
    return i < stop if step > 0 else i > stop


# -- if -------------------------------------------------------------------------------------
def convert_if(pred, true_fn, false_fn, args: tuple, names: tuple, where: str):
    """``if pred`` over variables ``names`` (current values ``args``); returns their new
    values."""
    if not is_traced(pred):
        return true_fn(*args) if pred else false_fn(*args)
    pred = control.as_pred(pred)
    fns = [true_fn, false_fn]
    what = f"branch of the `if` at {where}"
    bodies = [control.trace_fn(fn, args, what, names) for fn in fns]
    fixes = _reconcile(bodies, names, where)
    for k, fix in enumerate(fixes):
        if fix:
            bodies[k] = control.trace_fn(_fixed(fns[k], fix), args, what, names)
    _check_vars(bodies, names, where)
    with _checked("dg.cond", where):
        return control.emit_cond(pred, bodies, args)


def _check_vars(bodies, names, where) -> None:
    """Both branches give each variable the same type; the error names the variable."""
    for name, ta, tb in zip(names, *(_var_types(b) for b in bodies)):
        if _show(ta) != _show(tb):
            what = "the return value" if name == "_jst_ret_val" else f"variable {name!r}"
            raise ConversionTypeError(
                f"{what} is {_show(ta)} after the true branch but {_show(tb)} after the "
                f"false branch of the `if` at {where}, whose condition is a tensor", where,
                "Both must have the same structure, shapes and dtypes.")


def _show(t) -> str:
    """A variable's type as errors print it: ``f32[2]``, ``3``, ``(f32[2], [i64[]])``."""
    if isinstance(t, ShapedType):
        return type_str(t.shape, t.dtype)
    if t[0] == "tree":
        return _show_tree(t[1], iter(t[2]))
    return repr(t[1])


def _show_tree(spec, leaves) -> str:
    if spec is None:
        return _show(next(leaves))
    if spec[0] is dict:
        return "{" + ", ".join(f"{k!r}: {_show_tree(s, leaves)}"
                               for k, s in zip(spec[1], spec[2])) + "}"
    items = ", ".join(_show_tree(s, leaves) for s in spec[1])
    if spec[0] is list:
        return f"[{items}]"
    return f"({items}{',' if len(spec[1]) == 1 else ''})"


def _var_types(body) -> list:
    """Per variable a body returns: its type, ("const", value), or ("tree", spec, [leaf
    types]) for a structure (a returned tuple)."""
    types = iter(body.leaf_types())
    out = []
    for child in body.spec[1]:
        if child is None:
            out.append(next(types))
        else:
            leaves = [next(types) for _ in range(pytree.size(child))]
            out.append(("tree", child, leaves))
    return out


def _reconcile(bodies, names, where) -> list:
    """Per branch {variable index: fix} making both branches return the same types: a
    number facing a tensor becomes a tensor of its type, two different numbers become
    tensors, and the converter's own variables left unset become zeros. A user variable
    bound in one branch only is an error naming it."""
    types = [_var_types(b) for b in bodies]
    fixes = [{}, {}]
    for i, (ta, tb) in enumerate(zip(*types)):
        for k, (mine, other) in enumerate(((ta, tb), (tb, ta))):
            fix = _fix(mine, other, names[i], k, where)
            if fix is not None:
                fixes[k][i] = fix
    return fixes


def _unset(t) -> bool:
    return t[0] == "const" and (isinstance(t[1], Undefined) or t[1] is None)


def _is_tree(t) -> bool:
    return not isinstance(t, ShapedType) and t[0] == "tree"


def _fix(mine, other, name, k, where):
    if _is_tree(mine) and _is_tree(other) and mine[1] == other[1]:
        return _fix_tree(mine, other, name, k, where)
    if isinstance(mine, ShapedType) or _is_tree(mine) or other[0] == "const" and (
            _unset(other) or not isinstance(other[1], _NUMBERS)):
        return None
    value = mine[1]
    if _unset(mine):
        if not name.startswith("_jst_"):
            if isinstance(value, Undefined):
                branch = "false" if k == 0 else "true"
                raise ConversionNameError(
                    f"variable {name!r} is assigned only in the {branch} branch of the `if` "
                    f"at {where}, whose condition is a tensor", where, "Both branches "
                    f"become part of the graph, so give {name!r} a value before the `if` "
                    "or in both branches.")
            return None
        return lambda v: _zeros_of(other)
    if not isinstance(value, _NUMBERS):
        return None
    if isinstance(other, ShapedType):
        return lambda v: creation.full(tuple(other.shape), v,
                                       dtype=dtypes.from_np(other.dtype))
    if other[0] == "const" and not control.same_value(value, other[1]):
        floats = isinstance(value, float) or isinstance(other[1], float)
        dt = dtypes.default_float() if floats else np.result_type(type(value), type(other[1]))
        return lambda v: creation.tensor(v, dtype=dtypes.from_np(dt))
    return None


def _fix_tree(mine, other, name, k, where):
    """A structure's fix: each leaf fixed as a variable would be."""
    fixes = [_fix(a, b, name, k, where) for a, b in zip(mine[2], other[2])]
    if not any(fixes):
        return None

    def fix(value):
        leaves = pytree.flatten(value)[0]
        return pytree.unflatten(mine[1], [f(x) if f else x for f, x in zip(fixes, leaves)])
    return fix


def _zeros_of(t):
    """A value of type ``t`` (a type, a constant or a structure) made of zeros."""
    if isinstance(t, ShapedType):
        return creation.zeros(tuple(t.shape), dtype=dtypes.from_np(t.dtype))
    if t[0] == "const":
        return t[1]
    return pytree.unflatten(t[1], [_zeros_of(leaf) for leaf in t[2]])


def _fixed(fn, fixes: dict):
    def branch(*args):
        values = list(fn(*args))
        for i, fix in fixes.items():
            values[i] = fix(values[i])
        return tuple(values)
    return branch


# -- loops ------------------------------------------------------------------------------------
def convert_while(cond_fn, body_fn, args: tuple, names: tuple, where: str):
    """``while cond_fn(*vars): vars = body_fn(*vars)``. Runs in Python while the condition
    is a Python value; from the first traced condition, the remaining iterations become one
    ``while_loop`` node."""
    values = tuple(args)
    while True:
        pred = cond_fn(*values)
        if is_traced(pred):
            return _traced_while(cond_fn, body_fn, values, names, where)
        if not pred:
            return values
        values = tuple(body_fn(*values))


def _traced_while(cond_fn, body_fn, values, names, where):
    what = f"the `while` loop at {where}"
    values = _loop_values(values, names, what, where, lambda: control.trace_fn(
        body_fn, values, f"body of {what}"))
    with _checked(what, where):
        bodies = control.trace_loop(cond_fn, body_fn, values, what, names)
    return control.emit_while(bodies, values, LOOP_BOUND if grad_mode.enabled else None)


def convert_for(iterable, body_fn, args: tuple, names: tuple, where: str, flag=None):
    """``for item in iterable: vars = body_fn(item, *vars)``. A traced tensor is scanned
    over its leading axis (one ``scan`` node); anything else is a Python loop, which stops
    once the break flag (variable ``flag``) is a true Python value."""
    values = tuple(args)
    if is_traced(iterable):
        what = f"the `for` loop at {where}"
        row = control.Slot(tuple(iterable._data.shape[1:]), iterable._data.dtype)
        values = _loop_values(values, names, what, where, lambda: control.trace_fn(
            body_fn, (row, *values), f"body of {what}"))
        rows = row_writes(body_fn, row, values, what)
        with _checked(what, where):
            if rows:
                return scan_with_row_writes(body_fn, iterable, values, names, rows, what)
            carry, _ = control.emit_scan(lambda c, x: (tuple(body_fn(x, *c)), ()), values,
                                         [iterable], None, iterable.shape[0], what=what,
                                         names=names)
        return carry
    stop = names.index(flag) if flag else None
    for item in iterable:
        values = tuple(body_fn(item, *values))
        if stop is not None and not is_traced(values[stop]) and values[stop]:
            break
    return values


def _loop_values(values, names, what, where, trace_body) -> tuple:
    """Loop variables as a traced loop carries them: numbers become 0-d tensors; the
    converter's own unset variables (a return value) take zeros of the type the body gives
    them (``trace_body()`` traces it once to find out); an unset user variable is an error
    naming it."""
    out = []
    for name, v in zip(names, values):
        leaves, spec = pytree.flatten(v)
        v = pytree.unflatten(spec, [creation.tensor(x) if isinstance(x, _NUMBERS) else x
                                      for x in leaves])
        if isinstance(v, Undefined) and not name.startswith("_jst_"):
            raise ConversionNameError(
                f"variable {name!r} is first assigned inside {what}, whose condition is a "
                "tensor", where, f"Give {name!r} a value before the loop (a traced loop "
                "carries values of fixed type).")
        out.append(v)
    unset = [i for i, v in enumerate(out) if isinstance(v, Undefined) or v is None]
    if unset:
        types = _var_types(trace_body())
        for i in unset:
            out[i] = _zeros_of(types[i])
    return tuple(out)

