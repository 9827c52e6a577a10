"""Ops whose values or result shapes are known only when the graph runs.

``dims_tensor`` makes a tensor of dims that may be symbolic (``[B, 64]`` for a dynamic
batch ``B``): a shape computed from shapes becomes an ordinary int tensor at run time, where
arithmetic that symbolic dims can't express (``T - 1``) goes on with it.

``by_value`` runs a function on its inputs' *values* whose results' shapes depend on them: a
Reshape whose target shape is a tensor computed at run time, a TopK whose k is a graph
input. Its ``shapes`` give each result's dims: ints and symbolic dims known before the node
runs, which the kernel checks (a result that breaks what the graph assumed is an error,
never a silently different graph), and, as strings, the names of fresh symbolic dims for
the sizes the values set. The generated code reads those off the results as it runs, and
the later nodes work over them as over a dynamic batch.
"""
from __future__ import annotations

import numpy as np

from ..shapes import ShapedType, ShapeError, Sym
from .opdef import defop


def _dims_tensor(values, shape, dtype):
    return np.array(values, dtype).reshape(shape)


DIMS_TENSOR = defop("dims_tensor", _dims_tensor,
                    lambda values, shape, dtype: ShapedType(tuple(shape), np.dtype(dtype)),
                    attrs=("values", "shape", "dtype"),
                    doc="An int tensor of ``shape`` holding ``values`` (dims, some of them "
                        "symbolic: their sizes in this run).")


def _by_value_kernel(*xs, fn, shapes, dtypes):
    outs = fn(*xs)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(shapes):
        raise ShapeError(f"{fn!r} returned {len(outs)} results, not {len(shapes)}")
    checked = []
    for k, (out, want, dtype) in enumerate(zip(outs, shapes, dtypes)):
        out = np.asarray(out, dtype)
        if out.ndim != len(want) or any(type(w) is int and w != n
                                        for w, n in zip(want, out.shape)):
            raise ShapeError(f"{fn!r}: result {k} has shape {list(out.shape)} where the "
                             f"graph assumed {list(want)}")
        checked.append(out)
    return tuple(checked)


def _infer_by_value(*xs, fn, shapes, dtypes):
    return tuple(ShapedType(tuple(Sym(d) if isinstance(d, str) else d for d in shape),
                            np.dtype(dtype)) for shape, dtype in zip(shapes, dtypes))


BY_VALUE = defop("by_value", _by_value_kernel, _infer_by_value,
                 attrs=("fn", "shapes", "dtypes"), num_outputs=None,
                 doc="``fn(*inputs)``, a computation whose results' shapes depend on the "
                     "inputs' values: ``shapes`` hold the dims it checks and, as strings, "
                     "the names of the fresh dims the values set.")
