"""Linear algebra: matmul (and its named special cases mm, bmm, mv, dot, outer), einsum and
linear (torch's ``F.linear``, the fused ``x @ W.T + b`` every MLP layer runs).

Three primitives carry everything: ``matmul`` (NumPy's ``matmul``, which already has
torch's 1-D and batch-broadcasting semantics), ``einsum`` (an explicit equation without
ellipsis, whose VJP is another einsum) and ``linear`` (one GEMM plus an in-place bias add).
Float16/bfloat16 are computed in float32 and cast back, as NumPy has no fast loops for them.
"""
from __future__ import annotations

import functools
import math
import string

import numpy as np
try:   # what np.einsum(optimize=True) runs for two operands in NumPy 2.4
    from numpy._core.einsumfunc import bmm_einsum as _bmm_einsum
except ImportError:   # (another NumPy: its own einsum, planned at every call)
    _bmm_einsum = None

from .. import dtypes, kernels
from ..dispatch import AUTOCAST_FROM, apply, autocast
from ..kernels import matvec
from ..shapes import ShapedType, ShapeError, broadcast_shapes
from ..tensor import Tensor
from . import creation, elementwise, reduce
from . import shape as shape_ops
from ._util import (as_operand, cast, column_sum, is_float, needs_grad, out_in, out_part,
                    row_major, sum_to, zeros_view)
from .opdef import defop

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "outer", "einsum", "linear", "addmm",
           "baddbmm", "tensordot"]


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype a BLAS kernel runs in for results of dtype ``dt``."""
    return np.dtype(np.float32) if is_float(dt) and dt.itemsize < 4 else dt


BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# torch's names of scalar types, which its dtype-mismatch messages use
_TORCH_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half",
                "bfloat16": "BFloat16", "int64": "Long", "int32": "Int", "int16": "Short",
                "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def torch_name(dt) -> str:
    """``Double`` for float64: the scalar-type name torch's error messages use."""
    return _TORCH_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)


def check_same_dtype(op: str, x, w, *bias) -> None:
    """A layer's input, weight and bias must share one dtype, as torch requires: no
    promotion (a float64 batch, NumPy's default, through a float32 layer is torch's error,
    and computing it in float64 would differ from torch silently). The message opens with
    torch's own."""
    part, other = ("weight", w.dtype) if x.dtype != w.dtype else ("", None)
    if bias and bias[0].ndim and bias[0].dtype != x.dtype and op != "linear":
        part, other = "bias", bias[0].dtype   # (torch's conv names the bias first)
    if other is None:
        return
    if op == "linear":
        head = (f"mat1 and mat2 must have the same dtype, but got {torch_name(x.dtype)} "
                f"and {torch_name(other)}")
    else:
        head = (f"Input type ({torch_name(x.dtype).lower()}) and {part} type "
                f"({torch_name(other).lower()}) should be the same")
    raise TypeError(f"{head}: {op} computes in one dtype; convert the input to the layer's "
                    f"(x.to(dtype={np.dtype(other).name}); x.float() for a NumPy float64 "
                    "batch) or the layer to the input's (layer.to(dtype))")


def blas_operands(*arrays):
    """Arrays cast to their common compute dtype, and the dtype to return."""
    dt = arrays[0].dtype
    if dt in BLAS_DTYPES and all(a.dtype == dt for a in arrays):   # the usual case, fast
        return list(arrays), dt
    dt = dtypes.result_type(*arrays)
    ct = compute_dtype(dt)
    return [cast(a, ct) for a in arrays], dt


def mT(x):
    """``x`` with its last two dims swapped (a view)."""
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return shape_ops.permute(x, perm)


# -- matmul --------------------------------------------------------------------------------------
def _as_rows(a: np.ndarray) -> np.ndarray:
    """``a`` as the matrix of its rows along the last dim: ``reshape(-1, n)``, which NumPy
    refuses where ``a`` is empty and n is 0 (``f @ f.t()`` of an empty batch). (math.prod:
    NumPy's makes an array of the tuple, microseconds at every linear's backward.)"""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def _gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` of two matrices: in ranges of rows on two cores where
    the product is big enough (``split_gemm.by_rows``: one single-threaded ``sgemm`` each,
    the bits of one thread), else NumPy's call (OpenBLAS's own threading). Every 2-D
    product of ``linear``, its gradients and ``matmul`` comes here, eager and compiled."""
    y = kernels.split_gemm.by_rows(a, b, out)
    return np.matmul(a, b, out=out) if y is None else y


def _matmul_kernel(a, b, out=None):
    (a, b), dt = blas_operands(a, b)
    into = out_in(out, a.dtype)   # (None where the product is cast to dt afterwards)
    if a.ndim > 2 and b.ndim == 2:  # one GEMM over the flattened batch, not one per matrix
        a2 = _as_rows(a)
        rows = None if into is None else into.reshape(a2.shape[0], b.shape[-1])
        y = _gemm(a2, b, rows)
        y = y.reshape(a.shape[:-1] + b.shape[-1:])
    elif a.ndim == 2 and b.ndim == 2:
        y = _gemm(a, b, into)
    else:   # (a stack of small float32 products: on two cores, the same bits)
        y = kernels.batched.matmul(a, b, into) if kernels.batched.wanted(a, b) else None
        if y is None:
            y = np.matmul(a, b, out=into)
    return cast(y, dt)


def _infer_matmul(a, b):
    sa, sb = tuple(a.shape), tuple(b.shape)
    if not sa or not sb:
        raise ShapeError(f"matmul: both operands need at least 1 dim, got shapes {sa} and {sb}")
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if ka != kb:
        raise ShapeError(f"matmul: shapes {sa} and {sb} cannot be multiplied: the last dim of "
                         f"the first ({ka}) must equal the "
                         f"{'only' if len(sb) == 1 else 'second-to-last'} dim of the second "
                         f"({kb})")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    rows = sa[-2:-1]
    cols = sb[-1:] if len(sb) > 1 else ()
    return ShapedType(batch + rows + cols, dtypes.result_type(a, b))


def _matmul_vjp(g, out, a, b):
    # Promote 1-D operands to matrices (as matmul itself does), take the matrix VJP, sum
    # the broadcast batch dims away and drop the promoted dims again.
    if b.ndim == 2 and a.ndim > 1 and a.dtype == b.dtype and a._data.dtype in BLAS_DTYPES:
        grads = _matrix_rhs_vjp(g, a, b)
        if grads is not None:
            return grads
    a2 = a if a.ndim > 1 else shape_ops.reshape(a, (1, a.shape[0]))
    b2 = b if b.ndim > 1 else shape_ops.reshape(b, (b.shape[0], 1))
    batch = tuple(g.shape)[:g.ndim - (a.ndim > 1) - (b.ndim > 1)]
    g2 = shape_ops.reshape(g, batch + (a2.shape[-2], b2.shape[-1]))
    ga = gb = None
    if needs_grad(a):
        ga = sum_to(matmul(g2, mT(b2)), tuple(a2.shape))
        ga = shape_ops.reshape(ga, tuple(a.shape))
    if needs_grad(b):
        gb = sum_to(matmul(mT(a2), g2), tuple(b2.shape))
        gb = shape_ops.reshape(gb, tuple(b.shape))
    return ga, gb


def _matrix_rhs_vjp(g, a, b):
    """The VJP of ``a @ b`` for a matrix ``b``, which is ``linear(a, b.T)``: linear's
    gradients, ``a``'s without a transpose of ``b`` and ``b``'s as one GEMM over all of
    ``a``'s rows (not a product per batch and then their sum). None where the general rule
    takes no more ops (only ``b``'s gradient, of a matrix ``a``)."""
    need_a, need_b = needs_grad(a), needs_grad(b)
    if not need_b:
        return linear(g, b), None
    if not need_a and a.ndim == 2:
        return None
    ga, gw, _ = apply(LINEAR_BACKWARD, g, a, mT(b), need=(need_a, True, False))
    return (ga if need_a else None), mT(gw)


def _specialise_matmul(a, b):
    """Two matrices of one BLAS dtype: the kernel's work is :func:`_gemm` alone (no
    conversion, no batch to share among threads), so a call is that and nothing else."""
    if a.ndim == 2 and b.ndim == 2 and a.dtype in BLAS_DTYPES and b.dtype == a.dtype:
        return "matmul_blas", _gemm
    return None


# each operand is read only by the other's gradient (a weight changed in place after the
# product, with no gradient wanted for the input, is no error: torch's rule)
MATMUL = defop("matmul", _matmul_kernel, _infer_matmul, vjp=_matmul_vjp, saves="i",
               read_by={0: 1, 1: 0},
               onnx="MatMul", specialise=_specialise_matmul, fills_out=True,
               autocast="lower")


def matmul(input, other):
    """Matrix product with torch's rules: 1-D x 1-D is a dot product, a 1-D operand is a
    row (first) or column (second) vector that is dropped from the result, and batch dims
    broadcast.

    >>> matmul(ones(5, 2, 3), ones(3, 4)).shape
    Size([5, 2, 4])
    """
    return apply(MATMUL, as_operand(input), as_operand(other))


def _check_ndims(name, want, *tensors):
    for t, n in zip(tensors, want):
        if t.ndim != n:
            shapes = " and ".join(str(tuple(x.shape)) for x in tensors)
            raise ShapeError(f"{name} expects operands with {want} dims, got shapes {shapes}; "
                             "use matmul for other ranks")


def mm(input, mat2):
    """Product of two matrices (2-D only; ``matmul`` broadcasts)."""
    _check_ndims("mm", (2, 2), input, mat2)
    return matmul(input, mat2)


def bmm(input, mat2):
    """Batched product of (b, n, m) and (b, m, p) tensors (no broadcasting)."""
    _check_ndims("bmm", (3, 3), input, mat2)
    if input.shape[0] != mat2.shape[0]:
        raise ShapeError(f"bmm: batch sizes differ: shapes {tuple(input.shape)} and "
                         f"{tuple(mat2.shape)}")
    return matmul(input, mat2)


def tensordot(a, b, dims=2):
    """Sum products over ``dims`` of ``a`` and ``b``: the last ``dims`` of ``a`` with the
    first ``dims`` of ``b`` (an int), or the dims listed in ``([dims of a], [dims of
    b])``, as ``torch.tensordot``; an ``einsum``.

    >>> dg.tensordot(dg.ones(2, 3), dg.ones(3, 4), dims=1).shape
    dualgraph.Size([2, 4])
    """
    if isinstance(dims, int):
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    dims_a = [d % a.ndim for d in dims_a]
    dims_b = [d % b.ndim for d in dims_b]
    letters = iter(string.ascii_letters)
    sub_a = [next(letters) for _ in range(a.ndim)]
    sub_b = [next(letters) for _ in range(b.ndim)]
    for da, db in zip(dims_a, dims_b, strict=True):
        sub_b[db] = sub_a[da]
    out = ([s for d, s in enumerate(sub_a) if d not in dims_a]
           + [s for d, s in enumerate(sub_b) if d not in dims_b])
    return einsum(f"{''.join(sub_a)},{''.join(sub_b)}->{''.join(out)}", a, b)


def _scaled_sum(input, mat1, mat2, product_of, beta, alpha):
    """``beta * input + alpha * product_of(mat1, mat2)``; as torch, ``beta=0`` ignores
    ``input`` (NaNs in it included), and factors of 1 cost no op. Where the product is of
    half precision (float16 or bfloat16 operands, or float ones under autocast) the sum is
    formed in float32 from the operands rounded to that dtype and rounded once, as torch's
    kernels do (a float ``input`` rounded to it too: torch's addmm and baddbmm run in the
    low dtype under autocast, input included); rounding the product, each scaled term and
    the sum apart was four roundings where torch has one."""
    low = _half_product_dtype(mat1, mat2)
    if low is None:
        return _scaled_terms(input, product_of(mat1, mat2), beta, alpha)
    mat1, mat2 = (elementwise.cast_to(elementwise.cast_to(m, low), np.float32)
                  for m in (mat1, mat2))
    if isinstance(input, Tensor) and input.is_floating_point():
        input = elementwise.cast_to(elementwise.cast_to(input, low), np.float32)
    held, autocast.dtype = autocast.dtype, None   # (the float32 product, not autocast's)
    try:
        total = _scaled_terms(input, product_of(mat1, mat2), beta, alpha)
    finally:
        autocast.dtype = held
    return elementwise.cast_to(total, low)


def _half_product_dtype(mat1, mat2):
    """The half-precision dtype of ``mat1 @ mat2`` (autocast's where it is on and converts
    them), else None."""
    dts = (mat1._data.dtype, mat2._data.dtype)
    if autocast.dtype is not None and all(dt in AUTOCAST_FROM for dt in dts):
        low = np.dtype(autocast.dtype)
    else:
        low = dtypes.promote_types(*dts)
    return low if is_float(low) and low.itemsize == 2 else None


def _scaled_terms(input, product, beta, alpha):
    if alpha != 1:
        product = product * alpha
    if beta == 0:   # (input still gets its zero gradient, as in torch)
        return elementwise.where(False, input, product) if input.requires_grad else product
    return (input if beta == 1 else input * beta) + product


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` for matrices ``mat1``, ``mat2`` and an
    ``input`` that broadcasts to their product, as ``torch.addmm``.

    >>> dg.addmm(dg.ones(2), dg.eye(2), dg.full((2, 2), 2.0))
    tensor([[3., 3.],
            [3., 3.]])
    """
    return _scaled_sum(input, mat1, mat2, mm, beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * bmm(batch1, batch2)``, as ``torch.baddbmm`` (the attention
    scores' form ``baddbmm(bias, q, k.transpose(1, 2), alpha=scale)``)."""
    return _scaled_sum(input, batch1, batch2, bmm, beta, alpha)


def mv(input, vec):
    """Matrix-vector product."""
    _check_ndims("mv", (2, 1), input, vec)
    return matmul(input, vec)


def dot(input, other):
    """Dot product of two 1-D tensors."""
    _check_ndims("dot", (1, 1), input, other)
    return matmul(input, other)


def outer(input, vec2):
    """Outer product of two 1-D tensors: ``out[i, j] = input[i] * vec2[j]``."""
    _check_ndims("outer", (1, 1), input, vec2)
    return elementwise.mul(shape_ops.reshape(input, (-1, 1)), shape_ops.reshape(vec2, (1, -1)))


# -- einsum --------------------------------------------------------------------------------------
# The primitive takes a canonical equation: explicit output, no ellipsis, and operands whose
# dims agree per letter (the public function expands broadcast dims). Its VJP is then an
# einsum of the output gradient with the other operands.
def _parse(equation: str):
    lhs, rhs = equation.split("->")
    return lhs.split(","), rhs


def _letter_sizes(terms, shapes) -> dict:
    sizes = {}
    for term, shape in zip(terms, shapes):
        for ch, d in zip(term, shape):
            sizes.setdefault(ch, d)
    return sizes


@functools.lru_cache(maxsize=512)
def _einsum_plan(equation: str, shapes: tuple) -> tuple:
    """The pairwise contraction steps ``np.einsum(..., optimize=True)`` would plan for
    ``equation`` on operands of ``shapes``: ``(operand positions, step equation)`` each.
    NumPy parses the equation and searches the order on every call (about half of a small
    einsum's time, a tenth of an einsum-heavy eager step); the plan depends only on the
    equation and the shapes, so it is made once per pair of them."""
    dummies = [np.broadcast_to(np.zeros((), np.float64), s) for s in shapes]
    _, steps = np.einsum_path(equation, *dummies, optimize="greedy", einsum_call=True)
    return tuple((positions, step) for positions, step, _ in steps)


def _einsum_kernel(*operands, equation):
    arrays, dt = blas_operands(*operands)
    if len(arrays) == 1:   # a permutation, diagonal or sum: a view where NumPy's is one
        return cast(np.einsum(equation, *arrays), dt)
    if _bmm_einsum is None:
        return row_major(cast(np.einsum(equation, *arrays, optimize=True), dt))
    # a contraction runs the planned steps with the calls np.einsum(optimize=True) makes
    # (NumPy's batched-GEMM einsum for two operands, its C einsum otherwise): bit-equal to
    # it. The result is new memory, in the layout the last GEMM left, made row-major.
    arrays = list(arrays)
    for positions, step in _einsum_plan(equation, tuple(a.shape for a in arrays)):
        taken = [arrays.pop(i) for i in positions]
        arrays.append(_bmm_einsum(step, *taken) if len(taken) == 2 else np.einsum(step, *taken))
    return row_major(cast(arrays[0], dt))


def _infer_einsum(*operands, equation):
    terms, rhs = _parse(equation)
    sizes = _letter_sizes(terms, [tuple(o.shape) for o in operands])
    return ShapedType(tuple(sizes[ch] for ch in rhs), dtypes.result_type(*operands))


def _fresh_letters(used: str):
    return (ch for ch in string.ascii_letters if ch not in used)


def _einsum_vjp(g, out, *operands, equation):
    terms, rhs = _parse(equation)
    sizes = _letter_sizes(terms, [tuple(o.shape) for o in operands])
    return tuple(_einsum_operand_grad(g, operands, terms, rhs, sizes, i, equation)
                 if needs_grad(operands[i]) else None for i in range(len(operands)))


def _einsum_operand_grad(g, operands, terms, rhs, sizes, i, equation):
    """d/d operand i: contract the output gradient with every other operand. A letter
    repeated in term i (a diagonal) gets a fresh name tied to the first by an identity
    matrix; a letter only term i has (summed away) is broadcast back with expand."""
    fresh = _fresh_letters(equation)
    target, ties = "", []
    for ch in terms[i]:
        if ch in target:
            new = next(fresh)
            ties.append(ch + new)
            target += new
        else:
            target += ch
    others = [j for j in range(len(operands)) if j != i]
    sub = [rhs] + [terms[j] for j in others] + ties
    args = [g] + [operands[j] for j in others]
    args += [creation.eye(sizes[t[0]], dtype=g.dtype) for t in ties]
    present = "".join(sub)
    kept = "".join(ch for ch in target if ch in present)
    grad = einsum(",".join(sub) + "->" + kept, *args)
    if kept != target:
        grad = shape_ops.reshape(grad, tuple(sizes[ch] if ch in present else 1
                                             for ch in target))
        grad = shape_ops.expand(grad, tuple(operands[i].shape))
    return grad


def _from_onnx_einsum(b, xs, attrs):
    """ONNX's equation in dualgraph's form: spaces dropped, the implicit output (the letters
    seen once, sorted) written out, ``...`` replaced by letters of its own."""
    equation = attrs["equation"].replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    if "->" not in equation:
        letters = "".join(terms).replace(".", "")
        rhs = "..." * ("..." in lhs) + "".join(sorted(c for c in set(letters)
                                                      if letters.count(c) == 1))
    terms, rhs = _expand_ellipsis(terms, rhs, xs)
    sizes = {}
    for term, x in zip(terms, xs):
        for ch, d in zip(term, x.shape):
            if sizes.setdefault(ch, d) != d:
                raise b.error(f"einsum {equation!r}: letter {ch!r} has sizes {sizes[ch]} and "
                              f"{d}; dualgraph's einsum needs equal sizes (no broadcasting)")
    return b.op(EINSUM, *xs, equation=",".join(terms) + "->" + rhs)


def _expand_ellipsis(terms, rhs, xs):
    """Replace ``...`` with letters of their own (right-aligned across operands)."""
    if "..." not in "".join(terms):
        return terms, rhs
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in "".join(terms) + rhs]
    n = max(x.ndim - len(t.replace("...", "")) for t, x in zip(terms, xs) if "..." in t)
    ell = "".join(free[:n])
    terms = [t.replace("...", ell[n - (x.ndim - len(t.replace("...", ""))):])
             for t, x in zip(terms, xs)]
    return terms, rhs.replace("...", ell)


EINSUM = defop("einsum", _einsum_kernel, _infer_einsum, vjp=_einsum_vjp, attrs=("equation",),
               saves="i",
               onnx=lambda e, node: [e.op("Einsum", e.inputs(),
                                          equation=node.attrs["equation"])],
               onnx_import={"Einsum": _from_onnx_einsum},
               autocast="lower")


@functools.lru_cache(maxsize=256)
def _canonical(equation: str, shapes: tuple):
    """(explicit equation without ellipsis, target shape per operand).

    Ellipsis dims get fresh letters, right-aligned as in broadcasting; the implicit output
    (no ``->``) is the ellipsis dims then the letters seen once, sorted, as in torch.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: the equation {equation!r} has {len(terms)} operands but "
                         f"{len(shapes)} tensors were given")
    for t in terms + [rhs]:
        if any(ch not in string.ascii_letters for ch in t.replace("...", "")):
            raise ValueError(f"einsum: subscripts must be letters (and '...'), got {equation!r}")
    n_ell = max((len(s) - len(t) + 3 for t, s in zip(terms, shapes) if "..." in t), default=0)
    ell = "".join(_take(_fresh_letters(eq), n_ell))
    explicit = []
    for t, s in zip(terms, shapes):
        if "..." in t:
            k = len(s) - len(t) + 3
            if k < 0:
                raise ShapeError(f"einsum: term {t!r} has more subscripts than the operand "
                                 f"of shape {s} has dims")
            t = t.replace("...", ell[n_ell - k:])
        if len(t) != len(s):
            raise ShapeError(f"einsum: term {t!r} has {len(t)} subscripts but its operand has "
                             f"shape {s}")
        explicit.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(explicit)
        out = ell + "".join(sorted(ch for ch in set(letters) - set(ell)
                                   if letters.count(ch) == 1))
    _check_output(out, explicit, equation)
    sizes = _broadcast_letter_sizes(explicit, shapes, equation)
    targets = tuple(tuple(sizes[ch] for ch in t) for t in explicit)
    return ",".join(explicit) + "->" + out, targets


def _take(gen, n):
    return [next(gen) for _ in range(n)]


def _check_output(out, terms, equation):
    for ch in out:
        if out.count(ch) > 1:
            raise ValueError(f"einsum: output subscript {ch!r} appears more than once in "
                             f"{equation!r}")
        if not any(ch in t for t in terms):
            raise ValueError(f"einsum: output subscript {ch!r} does not appear in the inputs "
                             f"of {equation!r}")


def _broadcast_letter_sizes(terms, shapes, equation) -> dict:
    sizes: dict = {}
    for t, s in zip(terms, shapes):
        for ch, d in zip(t, s):
            old = sizes.get(ch, 1)
            if old != 1 and d != 1 and old != d:
                raise ShapeError(f"einsum: subscript {ch!r} of {equation!r} has size {old} in "
                                 f"one operand and {d} in another (shapes {list(shapes)})")
            sizes[ch] = d if old == 1 else old
    for t, s in zip(terms, shapes):  # a repeated subscript (a diagonal) can't broadcast
        for ch, d in zip(t, s):
            if t.count(ch) > 1 and d != sizes[ch]:
                raise ShapeError(f"einsum: repeated subscript {ch!r} in {t!r} has different "
                                 f"sizes in shape {s}")
    return sizes


def einsum(equation, *operands):
    """Einstein summation, as ``torch.einsum``: ``einsum("bij,bjk->bik", a, b)``.

    Supports any number of operands, ``...`` (broadcast dims), repeated subscripts
    (diagonals) and the implicit output form. Operands may also be passed as one list.
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    operands = [as_operand(o) for o in operands]
    eq, targets = _canonical(equation, tuple(tuple(o.shape) for o in operands))
    operands = [shape_ops.expand(o, t) if tuple(o.shape) != t else o
                for o, t in zip(operands, targets)]
    return apply(EINSUM, *operands, equation=eq)


# -- linear --------------------------------------------------------------------------------------
def _linear_kernel(x, w, *bias, out=None):
    if w.ndim != 2:   # (NumPy would broadcast a 3-D weight: the shape rule's error)
        _infer_linear(x, w, *bias)
    check_same_dtype("linear", x, w, *bias)   # (eager runs kernels, not shape rules)
    # batch 1: on two cores (the row count first: matvec.wanted's checks take ~1.5 us)
    if x.size == x.shape[-1] and matvec.wanted(x, w, bias[0] if bias else None):
        return matvec.matvec(x, w, *bias)
    dt = x.dtype
    if (x.ndim == 2 and dt in BLAS_DTYPES and w.dtype == dt
            and (not bias or bias[0].dtype == dt)):   # the usual case: nothing to convert
        return _product_t(x, w, *bias, out=out)
    (x, w, *bias), dt = blas_operands(x, w, *bias)
    x2 = _as_rows(x)
    into = out_in(out, x.dtype)
    y = _product_t(x2, w, *bias, out=None if into is None else into.reshape(x2.shape[0], -1))
    return cast(y.reshape(x.shape[:-1] + w.shape[:1]), dt)


def _packed_per_call(x2, m, out) -> bool:
    """Whether ``x2 @ m`` (2-D, ``m (K, N)``) runs on ``m`` packed at this call
    (``linear_packed.per_call``: float32, a short sum, full panels), into ``out`` where
    given (C-contiguous float32, as the loop writes)."""
    return (x2.dtype == np.float32 and m.dtype == np.float32 and x2.shape[1] == m.shape[0]
            and (out is None or (out.dtype == np.float32 and out.flags.c_contiguous))
            and kernels.linear_packed.per_call(x2.shape[0], *m.shape))


def _product_t(x2, w, *bias, out=None):
    """``x2 @ w.T + bias`` for a 2-D ``x2`` of the weight's BLAS dtype: on the weight packed
    at this call where ``linear_packed.per_call`` takes the shapes (the bias added in
    registers), else one BLAS call and the bias added in place (no temporary). Eager and
    compiled ``linear`` both come here, so they run the same loop on the same shapes."""
    if _packed_per_call(x2, w.T, out):   # (the bias is of x2's dtype: the callers see to it)
        lp = kernels.linear_packed
        return lp.product(x2, lp.pack(w), w.shape[0], bias[0] if bias else None, out)
    y = _gemm(x2, w.T, out)
    if bias:
        y += bias[0]
    return y


def _infer_linear(x, w, *bias):
    sx, sw = tuple(x.shape), tuple(w.shape)
    if len(sw) != 2 or not sx or sx[-1] != sw[1]:
        raise ShapeError(f"linear: input of shape {sx} and weight of shape {sw} don't fit: the "
                         "weight must be (out_features, in_features) with in_features equal "
                         "to the input's last dim")
    if bias and tuple(bias[0].shape) not in ((sw[0],), ()):
        raise ShapeError(f"linear: bias of shape {tuple(bias[0].shape)} does not match "
                         f"out_features={sw[0]} of the weight {sw}")
    check_same_dtype("linear", x, w, *bias)
    return ShapedType(sx[:-1] + sw[:1], dtypes.result_type(x, w, *bias))


def _linear_vjp(g, out, x, w, *bias):
    need = (needs_grad(x), needs_grad(w), bool(bias) and needs_grad(bias[0]))
    gx, gw, gb = apply(LINEAR_BACKWARD, g, x, w, need=need)
    grads = (gx if need[0] else None, gw if need[1] else None)
    return grads + ((gb if need[2] else None),) if bias else grads


def _linear_backward_kernel(g, x, w, need, out=None):
    """``(g @ w, g^T x, sum(g))`` over the flattened batch, each only if needed (a free
    broadcast zero stands in for the others): one op instead of seven in every MLP's
    backward. Each is written into its array of ``out`` where given (``fills_out``)."""
    (g, x, w), dt = blas_operands(g, x, w)
    g2 = _as_rows(g)
    rows = (None, None, None)   # (eager's call, most of them: the results are new arrays)
    if out is not None:
        into = [out_in(out_part(out, i), g.dtype) for i in range(3)]
        rows = [None if a is None else a.reshape(shape) for a, shape in
                zip(into, ((g2.shape[0], w.shape[1]), w.shape, w.shape[:1]))]
    gx = (cast(_product(g2, w, rows[0]).reshape(x.shape), dt) if need[0]
          else zeros_view(x.shape, dt))
    gw = (cast(_gemm(g2.T, _as_rows(x), rows[1]), dt) if need[1]
          else zeros_view(w.shape, dt))
    gb = cast(column_sum(g2, rows[2]), dt) if need[2] else zeros_view(
        w.shape[:1], dt)
    return gx, gw, gb


def _product(x2, m, out):
    """``x2 @ m`` (2-D): on ``m`` packed at this call where ``linear_packed.per_call`` takes
    the shapes, else one BLAS call."""
    if _packed_per_call(x2, m, out):
        lp = kernels.linear_packed
        return lp.product(x2, lp.pack_kn(m), m.shape[1], None, out)
    return _gemm(x2, m, out)


def _infer_linear_backward(g, x, w, need):
    dt = dtypes.result_type(g, x, w)
    return (ShapedType(tuple(x.shape), dt), ShapedType(tuple(w.shape), dt),
            ShapedType(tuple(w.shape)[:1], dt))


def _linear_backward_composite(g, x, w):
    g2 = shape_ops.reshape(g, (-1, w.shape[0]))
    return (matmul(g, w), matmul(mT(g2), shape_ops.reshape(x, (-1, w.shape[1]))),
            reduce.sum(g2, 0))


def _linear_backward_decomposition(g, x, w, need):
    """The composite's products, zeros where ``need`` leaves one out (as the kernel)."""
    outs = _linear_backward_composite(g, x, w)
    return tuple(o if n else creation.zeros_like(o) for o, n in zip(outs, need))


def _linear_backward_vjp(gg, out, g, x, w, need):
    """Second derivatives, in closed form: with cotangents ``cx, cw, cb`` of ``(g @ w,
    g^T x, sum(g))``, ``g`` gets ``cx @ w^T + x @ cw^T + cb``, ``x`` gets ``g @ cw`` and
    ``w`` gets ``g^T cx`` (over the flattened batch). The last two are this op again (on
    the cotangents), the first a ``linear``: a handful of ops instead of autodiff of the
    composite in a nested ``grad`` at every node. An output not in ``need`` has no
    cotangent (it is zeros, whatever its inputs)."""
    cx, cw, cb = (c if n else None for c, n in zip(gg, need))
    want = (needs_grad(x) and cw is not None, needs_grad(w) and cx is not None)
    grad_x = grad_w = None
    if any(want):
        # (x and w stand in for a missing cotangent: the output it would give is not needed)
        gx, gw, _ = apply(LINEAR_BACKWARD, g, x if cx is None else cx,
                          w if cw is None else cw, need=want + (False,))
        grad_x, grad_w = (gx if want[0] else None), (gw if want[1] else None)
    grad_g = None
    if needs_grad(g):
        terms = []
        if cx is not None:
            terms.append(linear(cx, w))
        if cw is not None:
            terms.append(linear(x, cw, cb))
        elif cb is not None:
            terms.append(shape_ops.expand(cb, tuple(g.shape)))
        for t in terms:
            grad_g = t if grad_g is None else grad_g + t
    return grad_g, grad_x, grad_w


LINEAR_BACKWARD = defop("linear_backward", _linear_backward_kernel, _infer_linear_backward,
                        compiler_only=True,
                        decomposition=_linear_backward_decomposition,
                        vjp=_linear_backward_vjp, attrs=("need",), num_outputs=3, saves="i",
                        onnx=None, fills_out=True)


def _linear_decomposition(x, w, *bias):
    y = matmul(x, mT(w))
    return y + bias[0] if bias else y


def _onnx_linear(e, node):
    """x @ w.T + b: one Gemm for a 2-d x, else MatMul with the transposed weight."""
    x, w = e.input(0), e.input(1)
    b = e.input(2) if len(node.inputs) > 2 else None
    if node.inputs[0].ndim == 2 and node.inputs[1].ndim == 2:
        return [e.op("Gemm", [x, w] + ([b] if b else []), transB=1)]
    y = e.op("MatMul", [x, e.op("Transpose", [w])])
    return [e.op("Add", [y, b]) if b else y]


def blas_2d(x, w, *bias) -> bool:
    """A ``linear`` of a 2-D input whose operands (Values or arrays) share its
    float32/float64 dtype: the kernel's fast path, with nothing to convert."""
    return (x.ndim == 2 and w.ndim == 2 and x.dtype in BLAS_DTYPES
            and all(hasattr(v, "dtype") and v.dtype == x.dtype for v in (w, *bias)))


def _matmul_t_relu(x, w, *bias, out=None):
    y = _product_t(x, w, *bias, out=out)
    np.maximum(y, 0, out=y)
    return y


def _matmul_t_add_bias_relu(x, w, b, out=None):
    if _packed_per_call(x, w.T, out):   # (the packed loop adds the bias: eager's bits)
        return _matmul_t_relu(x, w, b, out=out)
    y = _gemm(x, w.T, out)
    kernels.activations.add_bias_relu(y, b)   # the bias and the relu in one pass
    return y


def _specialise(relu: bool):
    """``specialise`` of ``linear`` (``relu=False``) and ``linear_relu``: for a 2-D product
    of one BLAS dtype, the kernel's fast path without its checks: one row of float32 (the
    shapes eager's ``linear`` computes there, ``matvec.product_shapes``) as a
    ``matvec.Plan`` worked out now, the relu applied inside it as the rows are written;
    else :func:`_product_t` (one matmul, the bias added in place, or the weight packed at
    the call where ``linear_packed.per_call`` takes the shapes, eager's choice), and the
    relu in place, with the bias in one float32 loop (``add_bias_relu``) where the bias
    has one entry per output and the product is the matmul."""
    def specialise(x, w, *bias):
        if not blas_2d(x, w, *bias):
            return None
        float32 = x.dtype == np.float32 and kernels.numba_available()
        if float32 and matvec.product_shapes(tuple(x.shape), tuple(w.shape),
                                             tuple(bias[0].shape) if bias else None):
            return ("matvec_relu" if relu else "matvec"), matvec.Plan(x.ndim, *w.shape,
                                                                       bool(bias), relu)
        if not relu:
            return "linear_blas", _product_t
        if float32 and bias and tuple(bias[0].shape) == tuple(w.shape[:1]):
            return "linear_add_bias_relu", _matmul_t_add_bias_relu
        return "linear_blas_relu", _matmul_t_relu
    return specialise


# (the bias is read by no gradient: not saved; x and the weight as matmul's operands)
LINEAR = defop("linear", _linear_kernel, _infer_linear, vjp=_linear_vjp, saves="01",
               read_by={0: 1, 1: 0},
               decomposition=_linear_decomposition,
               onnx=_onnx_linear,
               specialise=_specialise(relu=False), fills_out=True,
               autocast="lower")


def _linear_relu_kernel(x, w, *bias, out=None):
    y = _linear_kernel(x, w, *bias, out=out)   # (a fresh array)
    np.maximum(y, 0, out=y)
    return y


# Made by the lowering rule ``linear_relu`` after autodiff, so it needs no VJP.
LINEAR_RELU = defop("linear_relu", _linear_relu_kernel, _infer_linear, onnx=None,
                    specialise=_specialise(relu=True), fills_out=True,
                    compiler_only=True,
                    decomposition=lambda x, w, *bias: elementwise.relu(linear(x, w, *bias)),
                    doc="relu(linear(x, w, b)) with the relu applied to the product's own "
                        "array: no second array, and one pass for the bias and the relu.")


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` in one kernel, as ``torch.nn.functional.linear``.

    >>> linear(ones(8, 3), ones(4, 3), zeros(4)).shape
    Size([8, 4])
    """
    if bias is None:
        return apply(LINEAR, input, weight)
    return apply(LINEAR, input, weight, as_operand(bias))


METHODS = {"matmul": matmul, "__matmul__": matmul,
           "__rmatmul__": lambda self, other: matmul(other, self),
           "mm": mm, "bmm": bmm, "mv": mv, "dot": dot, "outer": outer, "addmm": addmm,
           "baddbmm": baddbmm}
