"""Rows for the matrix decompositions and solvers (dg.linalg): inv, solve, slogdet,
cholesky, qr, eigh/eigvalsh, svd/svdvals, matrix_exp, the LU factorisation and its solves. Eigen- and singular vectors are
defined up to sign: the rows check functions of them that are not (V * V, U @ Vh)."""
import numpy as np

from . import In, OpCase

BOTH = ("float32", "float64")


def well_conditioned(*shape):
    """Random matrices plus a multiple of the identity (far from singular)."""
    def make(rng, dtype):
        n = shape[-1]
        return (rng.standard_normal(shape) + 3 * np.eye(n)).astype(dtype)
    return In(shape, "custom", fn=make)


def spd(*shape):
    def make(rng, dtype):
        x = rng.standard_normal(shape)
        return (x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)
    return In(shape, "custom", fn=make)


def _lu_solve(left, adjoint):
    def fn(m, a, b):
        LU, pivots = m.linalg.lu_factor(a)
        return m.linalg.lu_solve(LU, pivots, b if left else b.mT, left=left, adjoint=adjoint)
    return fn


def _eigh(m, a):
    w, v = m.linalg.eigh(a + a.mT)
    return w, v * v


def _svd(full):
    def fn(m, a):
        u, s, vh = m.linalg.svd(a, full_matrices=full)
        k = s.shape[-1]
        return s, u[..., :k] @ vh[..., :k, :], u[..., :k] * u[..., :k]
    return fn


CASES = [
    OpCase("linalg_inv", lambda m, a: m.linalg.inv(a), [well_conditioned(3, 3)], dtypes=BOTH),
    OpCase("linalg_inv", lambda m, a: a.inverse(), [well_conditioned(2, 4, 4)], "batch"),
    OpCase("linalg_solve", lambda m, a, b: m.linalg.solve(a, b),
           [well_conditioned(3, 3), In((3, 2))], dtypes=BOTH),
    OpCase("linalg_solve", lambda m, a, b: m.linalg.solve(a, b),
           [well_conditioned(2, 3, 3), In((3,))], "vector"),
    OpCase("linalg_solve", lambda m, a, b: m.linalg.solve(a, b),
           [well_conditioned(2, 1, 3, 3), In((4, 3, 2))], "broadcast"),
    OpCase("linalg_solve", lambda m, a, b: m.linalg.solve_triangular(a, b, upper=True),
           [well_conditioned(3, 3), In((3, 2))], "triangular"),
    OpCase("linalg_slogdet", lambda m, a: m.linalg.slogdet(a)[1], [well_conditioned(3, 3)],
           dtypes=BOTH),
    OpCase("linalg_slogdet", lambda m, a: m.linalg.slogdet(-a), [well_conditioned(3, 3)],
           "sign", grad=False),
    OpCase("linalg_slogdet", lambda m, a: m.linalg.det(a), [well_conditioned(2, 3, 3)], "det"),
    OpCase("linalg_slogdet", lambda m, a: a.logdet(), [spd(3, 3)], "logdet"),
    # (In((4, 4)): pivots that interchange rows; well_conditioned: none at all)
    OpCase("linalg_lu_factor", lambda m, a: m.linalg.lu_factor(a), [In((4, 4))], dtypes=BOTH),
    OpCase("linalg_lu_factor", lambda m, a: m.linalg.lu(a), [In((2, 3, 3))], "plu"),
    OpCase("linalg_lu_factor", lambda m, a: m.lu_unpack(*a.lu()), [well_conditioned(3, 3)],
           "unpack"),
    OpCase("linalg_lu_factor", lambda m, a: m.linalg.lu_factor_ex(a * a.tril(-1)),
           [In((2, 3, 3))], "singular", grad=False),
    OpCase("linalg_lu_factor", lambda m, a: m.lu(a[:, :1].expand(2, 3, 3), get_infos=True),
           [In((2, 3, 3))], "singular-infos", grad=False),
    OpCase("linalg_lu_factor", _lu_solve(True, False), [In((2, 3, 3)), In((2, 3, 2))], "solve"),
    OpCase("linalg_lu_factor", _lu_solve(True, True), [In((3, 3)), In((3, 2))],
           "solve-adjoint"),
    OpCase("linalg_lu_factor", _lu_solve(False, False), [In((3, 3)), In((3, 2))],
           "solve-right"),
    OpCase("linalg_lu_factor", _lu_solve(False, True), [In((3, 3)), In((3, 2))],
           "solve-right-adjoint"),
    OpCase("linalg_lu_factor", lambda m, a, b: m.lu_solve(b, *m.lu(a)),
           [In((2, 4, 4)), In((2, 4, 1))], "torch.lu_solve"),
    OpCase("lu_pivots_to_permutation", lambda m, a: m.lu_unpack(*m.linalg.lu_factor(a))[0],
           [In((2, 5, 5))], grad=False),
    OpCase("linalg_cholesky", lambda m, a: m.linalg.cholesky((a + a.mT) / 2), [spd(4, 4)],
           dtypes=BOTH),
    OpCase("linalg_cholesky", lambda m, a: m.linalg.cholesky((a + a.mT) / 2, upper=True),
           [spd(2, 3, 3)], "upper"),
    OpCase("linalg_qr", lambda m, a: m.linalg.qr(a), [In((5, 3))], "tall", dtypes=BOTH),
    OpCase("linalg_qr", lambda m, a: m.linalg.qr(a), [In((2, 3, 3))], "square"),
    OpCase("linalg_qr", lambda m, a: m.linalg.qr(a, mode="complete"), [In((3, 3))],
           "complete"),
    OpCase("linalg_qr", lambda m, a: m.linalg.qr(a, mode="complete"), [In((3, 5))], "wide",
           grad=False),
    OpCase("linalg_eigh", _eigh, [In((4, 4))], dtypes=BOTH),
    OpCase("linalg_eigh", _eigh, [In((2, 3, 3))], "batch"),
    OpCase("linalg_eigvalsh", lambda m, a: m.linalg.eigvalsh(a + a.mT), [In((4, 4))],
           dtypes=BOTH),
    OpCase("linalg_svd", _svd(False), [In((5, 3))], "tall", dtypes=BOTH),
    OpCase("linalg_svd", _svd(False), [In((2, 3, 5))], "wide"),
    OpCase("linalg_svd", _svd(True), [In((4, 4))], "square-full"),
    OpCase("linalg_svd", lambda m, a: m.linalg.pinv(a), [In((4, 3))], "pinv"),
    OpCase("linalg_svd", lambda m, a, b: m.linalg.lstsq(a, b).solution,
           [In((5, 3)), In((5, 2))], "lstsq"),
    OpCase("linalg_svdvals", lambda m, a: m.linalg.svdvals(a), [In((4, 3))], dtypes=BOTH),
    OpCase("linalg_svdvals", lambda m, a: m.linalg.matrix_norm(a, "nuc"), [In((2, 3, 4))],
           "nuc"),
    OpCase("linalg_svdvals", lambda m, a: m.linalg.matrix_norm(a, 2), [In((3, 4))], "2"),
    OpCase("linalg_matrix_exp", lambda m, a: m.linalg.matrix_exp(a * 0.5), [In((3, 3))],
           dtypes=BOTH),
    OpCase("linalg_matrix_exp", lambda m, a: m.matrix_exp(a * 3), [In((2, 4, 4))], "scaled",
           rtol=1e-3),
]
