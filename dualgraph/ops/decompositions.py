"""Matrix decompositions and solvers (``torch.linalg``'s): NumPy's LAPACK forward, torch's
gradients.

Primitives, each over a batch of matrices (..., m, n): ``linalg_inv``, ``linalg_solve``,
``linalg_slogdet``, ``linalg_cholesky``, ``linalg_qr``, ``linalg_eigh`` and
``linalg_eigvalsh``, ``linalg_svd`` and ``linalg_svdvals``, ``linalg_matrix_exp``. Their
VJPs are the formulas of PyTorch's ``FunctionsManual.cpp`` written with dualgraph ops, so
they differentiate again; the eigenvalue-only and singular-value-only ops have their own
VJP (``V diag(g) V^T``), which stays finite where repeated values make the full
decomposition's gradient undefined. The composites (``det``, ``pinv``, ``lstsq``, ...)
are in ``dualgraph/linalg.py``. Only float32 and float64 are taken, as torch's CPU does.

>>> import dualgraph as dg
>>> a = dg.tensor([[4.0, 1.0], [1.0, 3.0]])
>>> (inv(a) @ a).round().tolist()
[[1.0, 0.0], [0.0, 1.0]]
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..dispatch import apply
from ..shapes import ShapedType, ShapeError, broadcast_shapes
from . import creation, index, linalg
from . import shape as shape_ops
from ._util import sum_to
from .opdef import defop

__all__ = ["inv", "solve", "slogdet", "cholesky", "qr", "eigh", "eigvalsh", "svd", "svdvals",
           "matrix_exp"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _check(name: str, a, square=True):
    """Called by each op's shape rule and, for eager calls (which skip it), by the
    function that applies the op: the same error in both modes."""
    if getattr(a.dtype, "np", a.dtype) not in _FLOATS:
        raise TypeError(f"linalg.{name}: expected a float32 or float64 tensor, got "
                        f"{a.dtype}; convert with .double() or .float()")
    if a.ndim < 2 or (square and a.shape[-1] != a.shape[-2]):
        what = "a batch of square matrices (*, n, n)" if square else "a batch of matrices"
        raise ShapeError(f"linalg.{name}: expected {what}, got shape {tuple(a.shape)}")


def _same(name):
    def infer(a, **attrs):
        _check(name, a)
        return ShapedType(tuple(a.shape), a.dtype)
    return infer


def _eye(a):
    return creation.eye(a.shape[-1], dtype=a.dtype)


def _diag(v):
    """Diagonal matrices (..., n, n) with ``v`` (..., n) on their diagonals."""
    return shape_ops.unsqueeze(v, -1) * creation.eye(v.shape[-1], dtype=v.dtype)


def _mT(x):
    return linalg.mT(x)


# -- inverse and solve ---------------------------------------------------------------------
def _inv_vjp(g, out, a):
    return -(_mT(out) @ g @ _mT(out))


INV = defop("linalg_inv", lambda a: np.linalg.inv(a).astype(a.dtype, copy=False),
            _same("inv"), _inv_vjp, saves="o", doc="A^-1 (LAPACK getrf/getri)")


def _infer_solve(a, b):
    _check("solve", a)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1] or b.dtype != a.dtype:
        raise ShapeError(f"linalg.solve: A of shape {tuple(a.shape)} and B of shape "
                         f"{tuple(b.shape)} ({a.dtype}, {b.dtype}) do not fit: B must be "
                         f"(*, n, k) or (*, n) with A's n and dtype")
    batch = broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return ShapedType(batch + tuple(b.shape[-2:]), a.dtype)


def _solve_kernel(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    return np.linalg.solve(a, np.broadcast_to(b, batch + b.shape[-2:])).astype(a.dtype)


def _solve_vjp(g, out, a, b):
    gb = solve(_mT(a), g)
    return sum_to(-(gb @ _mT(out)), tuple(a.shape)), sum_to(gb, tuple(b.shape))


SOLVE = defop("linalg_solve", _solve_kernel, _infer_solve, _solve_vjp, saves="io",
              doc="X with A X = B (LAPACK gesv); batch dims broadcast")


# -- determinants --------------------------------------------------------------------------
def _infer_slogdet(a):
    _check("slogdet", a)
    t = ShapedType(tuple(a.shape[:-2]), a.dtype)
    return t, t


def _slogdet_kernel(a):
    sign, logabs = np.linalg.slogdet(a)
    return np.asarray(sign, a.dtype), np.asarray(logabs, a.dtype)


def _slogdet_vjp(g, out, a):
    return shape_ops.unsqueeze(shape_ops.unsqueeze(g[1], -1), -1) * _mT(inv(a))


SLOGDET = defop("linalg_slogdet", _slogdet_kernel, _infer_slogdet, _slogdet_vjp,
                num_outputs=2, differentiable_outputs=(1,), saves="i",
                doc="(sign, log|det A|) (LAPACK getrf)")


# -- Cholesky ------------------------------------------------------------------------------
def _cholesky_kernel(a):
    try:
        return np.linalg.cholesky(a).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise ValueError("linalg.cholesky: the input is not positive-definite (the "
                         "factorization could not be completed)") from None


def _cholesky_vjp(g, out, a):
    linv = inv(out)
    phi = index.tril(_mT(out) @ g)
    phi = phi - 0.5 * phi * _eye(phi)
    ga = _mT(linv) @ phi @ linv
    return 0.5 * (ga + _mT(ga))


CHOLESKY = defop("linalg_cholesky", _cholesky_kernel, _same("cholesky"), _cholesky_vjp,
                 saves="o", doc="L lower triangular with L L^T = A (LAPACK potrf)")


# -- QR ------------------------------------------------------------------------------------
def _infer_qr(a, *, mode):
    _check("qr", a, square=False)
    m, n = a.shape[-2:]
    k = m if mode == "complete" else min(m, n)
    batch = tuple(a.shape[:-2])
    return ShapedType(batch + (m, k), a.dtype), ShapedType(batch + (k, n), a.dtype)


def _qr_kernel(a, *, mode):
    q, r = np.linalg.qr(a, mode=mode)
    return q.astype(a.dtype, copy=False), r.astype(a.dtype, copy=False)


def _qr_vjp(g, out, a, *, mode):
    (q, r), (gq, gr) = out, g
    m, n = a.shape[-2:]
    if m < n or (mode == "complete" and m > n):
        raise NotImplementedError(
            f"linalg.qr: the gradient for an input of shape {tuple(a.shape)} with "
            f"mode={mode!r} is not implemented (torch's neither for complete mode with more "
            f"rows than columns); use a matrix with at least as many rows as columns")
    mm = r @ _mT(gr) - _mT(gq) @ q
    b = gq + q @ (index.tril(mm) + _mT(index.tril(mm, -1)))
    return _mT(solve(r, _mT(b)))   # b R^-T


QR = defop("linalg_qr", _qr_kernel, _infer_qr, _qr_vjp, attrs=("mode",), num_outputs=2,
           saves="o", doc="Q with orthonormal columns and R upper triangular, A = QR")


# -- symmetric eigenproblems ---------------------------------------------------------------
def _infer_eigh(a, *, UPLO):
    _check("eigh", a)
    return ShapedType(tuple(a.shape[:-1]), a.dtype), ShapedType(tuple(a.shape), a.dtype)


def _eigh_kernel(a, *, UPLO):
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    return w.astype(a.dtype, copy=False), v.astype(a.dtype, copy=False)


def _eigh_vjp(g, out, a, *, UPLO):
    (w, v), (gw, gv) = out, g
    vgv = _mT(v) @ gv
    vgv = 0.5 * (vgv - _mT(vgv))
    gaps = shape_ops.unsqueeze(w, -2) - shape_ops.unsqueeze(w, -1) + _eye(a)
    return v @ (vgv / gaps + _diag(gw)) @ _mT(v)


EIGH = defop("linalg_eigh", _eigh_kernel, _infer_eigh, _eigh_vjp, attrs=("UPLO",),
             num_outputs=2, saves="o",
             doc="eigenvalues (ascending) and eigenvectors of a symmetric matrix (syevd)")


def _eigvalsh_vjp(g, out, a, *, UPLO):
    _, v = eigh(a, UPLO)
    return v @ _diag(g) @ _mT(v)


EIGVALSH = defop("linalg_eigvalsh",
                 lambda a, *, UPLO: np.linalg.eigvalsh(a, UPLO=UPLO).astype(a.dtype),
                 lambda a, *, UPLO: _infer_eigh(a, UPLO=UPLO)[0], _eigvalsh_vjp,
                 attrs=("UPLO",), doc="eigenvalues (ascending) of a symmetric matrix")


# -- singular values -----------------------------------------------------------------------
def _infer_svd(a, *, full_matrices):
    _check("svd", a, square=False)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    return (ShapedType(batch + (m, m if full_matrices else k), a.dtype),
            ShapedType(batch + (k,), a.dtype),
            ShapedType(batch + (n if full_matrices else k, n), a.dtype))


def _svd_kernel(a, *, full_matrices):
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return tuple(x.astype(a.dtype, copy=False) for x in (u, s, vh))


def _svd_vjp(g, out, a, *, full_matrices):
    (u, s, vh), (gu, gs, gvh) = out, g
    m, n = a.shape[-2:]
    k = min(m, n)
    if full_matrices:   # (only the first k singular vectors have a gradient, as torch's)
        u, gu, vh, gvh = u[..., :k], gu[..., :k], vh[..., :k, :], gvh[..., :k, :]
    ugu = _mT(u) @ gu
    vgv = vh @ _mT(gvh)
    s2 = s * s
    gaps = shape_ops.unsqueeze(s2, -2) - shape_ops.unsqueeze(s2, -1) + _eye(ugu)
    ga = ((ugu - _mT(ugu)) * shape_ops.unsqueeze(s, -2)
          + shape_ops.unsqueeze(s, -1) * (vgv - _mT(vgv))) / gaps + _diag(gs)
    if m > n:
        gus = gu / shape_ops.unsqueeze(s, -2)
        return (u @ ga + gus - u @ (_mT(u) @ gus)) @ vh
    if m < n:
        gvs = gvh / shape_ops.unsqueeze(s, -1)
        return u @ (ga @ vh + gvs - (gvs @ _mT(vh)) @ vh)
    return u @ ga @ vh


SVD = defop("linalg_svd", _svd_kernel, _infer_svd, _svd_vjp, attrs=("full_matrices",),
            num_outputs=3, saves="o", doc="U, S (descending), Vh with A = U diag(S) Vh")


def _svdvals_vjp(g, out, a):
    u, _, vh = svd(a, full_matrices=False)
    return u @ (shape_ops.unsqueeze(g, -1) * vh)


SVDVALS = defop("linalg_svdvals",
                lambda a: np.linalg.svd(a, compute_uv=False).astype(a.dtype, copy=False),
                lambda a: _infer_svd(a, full_matrices=False)[1], _svdvals_vjp,
                doc="the singular values (descending)")


# -- matrix exponential --------------------------------------------------------------------
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
           1187353796428800.0, 129060195264000.0, 10559470521600.0, 670442572800.0,
           33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)


def _expm_kernel(a):
    """Scaling and squaring with the degree-13 Padé approximant (Higham, 2005), in
    float64: the scale makes every matrix's 1-norm at most 5.37."""
    x = a.astype(np.float64)
    norm = float(np.abs(x).sum(-2).max()) if x.size else 0.0
    steps = max(0, int(np.ceil(np.log2(norm / 5.371920351148152)))) if norm > 0 else 0
    x = x / 2.0 ** steps
    b, eye = _PADE13, np.eye(x.shape[-1])
    x2 = x @ x
    x4 = x2 @ x2
    x6 = x4 @ x2
    u = x @ (x6 @ (b[13] * x6 + b[11] * x4 + b[9] * x2)
             + b[7] * x6 + b[5] * x4 + b[3] * x2 + b[1] * eye)
    v = x6 @ (b[12] * x6 + b[10] * x4 + b[8] * x2) + b[6] * x6 + b[4] * x4 + b[2] * x2 \
        + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for _ in range(steps):
        r = r @ r
    return r.astype(a.dtype)


def _expm_vjp(g, out, a):
    """The upper right block of exp([[A^T, G], [0, A^T]]), as torch's."""
    at = _mT(a)
    top = shape_ops.cat([at, g], -1)
    bottom = shape_ops.cat([creation.zeros_like(at), at], -1)
    n = a.shape[-1]
    return matrix_exp(shape_ops.cat([top, bottom], -2))[..., :n, n:]


MATRIX_EXP = defop("linalg_matrix_exp", _expm_kernel, _same("matrix_exp"), _expm_vjp,
                   doc="e^A, by scaling and squaring (Padé 13)")


# -- the calls -----------------------------------------------------------------------------
def inv(A):
    """The inverse of each square matrix of ``A``; a singular one is an error."""
    _check("inv", A)
    return apply(INV, A)


def solve(A, B):
    """X with ``A X = B``; ``B`` may be (*, n, k) or a batch of vectors (*, n), as
    ``torch.linalg.solve`` (left=True)."""
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if vector:
        return shape_ops.squeeze(solve(A, shape_ops.unsqueeze(B, -1)), -1)
    _infer_solve(A, B)
    return apply(SOLVE, A, B)


def slogdet(A):
    """(sign, log |det A|) of each square matrix."""
    _check("slogdet", A)
    return apply(SLOGDET, A)


def cholesky(A, upper=False):
    """The lower (or, with ``upper``, upper) Cholesky factor of a symmetric positive-
    definite matrix (its lower triangle is read)."""
    _check("cholesky", A)
    lower = apply(CHOLESKY, A)
    return _mT(lower) if upper else lower


def qr(A, mode="reduced"):
    """(Q, R) with ``A = Q R``; ``mode`` 'reduced', 'complete' or 'r' (Q empty)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    _check("qr", A, square=False)
    q, r = apply(QR, A, mode="reduced" if mode == "r" else mode)
    return (creation.zeros(0, dtype=A.dtype), r) if mode == "r" else (q, r)


def eigh(A, UPLO="L"):
    """(eigenvalues ascending, eigenvectors as columns) of symmetric matrices, reading the
    ``UPLO`` triangle."""
    _check("eigh", A)
    return apply(EIGH, A, UPLO=UPLO)


def eigvalsh(A, UPLO="L"):
    """The eigenvalues (ascending) of symmetric matrices."""
    _check("eigvalsh", A)
    return apply(EIGVALSH, A, UPLO=UPLO)


def svd(A, full_matrices=True):
    """(U, S, Vh) with ``A = U diag(S) Vh``, as ``torch.linalg.svd``."""
    _check("svd", A, square=False)
    return apply(SVD, A, full_matrices=bool(full_matrices))


def svdvals(A):
    """The singular values of each matrix, descending."""
    _check("svdvals", A, square=False)
    return apply(SVDVALS, A)


def matrix_exp(A):
    """The matrix exponential of each square matrix."""
    _check("matrix_exp", A)
    return apply(MATRIX_EXP, A)


# -- composites ----------------------------------------------------------------------------
def det(A):
    """The determinant, ``sign * exp(log |det|)`` (its gradient ``det * A^-T``; a singular
    matrix's gradient is not finite, where torch's is)."""
    sign, logabs = slogdet(A)
    return sign * logabs.exp()


def logdet(A):
    """log det A: NaN for a negative determinant, -inf for a zero one, as torch's."""
    sign, logabs = slogdet(A)
    return logabs.where(sign >= 0, float("nan"))


def _cutoff(s, atol, rtol, shape):
    """The threshold below which singular values count as zero (torch's pinv/matrix_rank
    rule: max(atol, rtol * largest), rtol = eps * max(m, n) when neither is given)."""
    if rtol is None:
        rtol = 0.0 if atol else float(np.finfo(s.dtype.np).eps) * max(shape[-2:])
    largest = s[..., :1] if s.shape[-1] else s
    return (largest * rtol).clamp(min=float(atol or 0.0))


def pinv(A, atol=None, rtol=None, hermitian=False):
    """The Moore-Penrose pseudo-inverse (from the SVD, small singular values dropped)."""
    u, s, vh = svd(A, full_matrices=False)
    keep = s > _cutoff(s, atol, rtol, A.shape)
    s_inv = (1 / s.where(keep, 1.0)).where(keep, 0.0)
    return _mT(vh) @ (shape_ops.unsqueeze(s_inv, -1) * _mT(u))


def matrix_rank(A, atol=None, rtol=None, hermitian=False):
    """The number of singular values above the cutoff (int64)."""
    s = svdvals(A)
    return (s > _cutoff(s, atol, rtol, A.shape)).sum(-1)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with ``A X = B`` (or ``X A = B`` with ``left=False``) reading only ``A``'s
    ``upper`` or lower triangle (its diagonal taken as ones with ``unitriangular``)."""
    tri = index.triu(A) if upper else index.tril(A)
    if unitriangular:
        tri = tri - tri * _eye(tri) + _eye(tri)
    return solve(tri, B) if left else _mT(solve(_mT(tri), _mT(B)))


TriangularSolveResult = namedtuple("triangular_solve", ["solution", "cloned_coefficient"])


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """``torch.triangular_solve`` (the older spelling, right-hand side first): X with
    ``op(A) X = b``, op(A) being ``A`` or its transpose, and a copy of ``A`` broadcast to
    the batch dims of both (as torch's)."""
    tri = _mT(A) if transpose else A
    x = solve_triangular(tri, b, upper=upper != transpose, unitriangular=unitriangular)
    batch = broadcast_shapes(tuple(A.shape[:-2]), tuple(b.shape[:-2]))
    return TriangularSolveResult(x, shape_ops.expand(A, batch + tuple(A.shape[-2:])).clone())


def _torch_svd(A, some=True, compute_uv=True):
    """``torch.svd``: (U, S, V) (V, not Vh), reduced unless ``some=False``."""
    u, s, vh = svd(A, full_matrices=not some)
    return u, s, _mT(vh)


def _torch_qr(A, some=True):
    return qr(A, "reduced" if some else "complete")


METHODS = {"det": det, "logdet": logdet, "slogdet": slogdet, "inverse": inv,
           "pinverse": lambda self, rcond=1e-15: pinv(self, rtol=rcond),
           "svd": _torch_svd, "qr": _torch_qr, "cholesky": cholesky,
           "matrix_exp": matrix_exp, "triangular_solve": triangular_solve}
