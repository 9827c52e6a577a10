"""Rows for the torch names ported programs met missing (issue 26): the special functions
of ops/special_series.py (erfcx, ndtri, the modified Bessel I0/I1 family, zeta, and the
composites ndtr, log_ndtr, sinc, mvlgamma; entr), xlog1py, ops/float_bits.py (copysign,
nextafter, frexp), ops/selection.py (mode, nanmedian, msort) and ops/compose.py (trapezoid,
block_diag, cartesian_prod, renorm, put, index_reduce, cholesky_solve / _inverse).
Composites are listed under the op that carries them."""
import numpy as np

from . import In, OpCase
from .decompositions import spd
from .elementwise import away, fixed, uniform

ALL = ("float32", "float64", "float16", "bfloat16")
F64 = ("float32", "float64")
EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0]


def ties(*shape, high=3):
    """Whole numbers as floats, drawn from few values: many ties."""
    return In(shape, "custom", grad=True,
              fn=lambda rng, dt: rng.integers(0, high, shape).astype(dt))


def with_nans(*shape):
    """Well-separated floats with about a third of them NaN."""
    def make(rng, dt):
        a = (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 0.6).astype(dt)
        a[rng.random(shape) < 0.3] = np.nan
        return a
    return In(shape, "custom", fn=make)


def lower_factor(n):
    """A Cholesky factor: lower triangular with a positive diagonal."""
    return In((n, n), "custom", fn=lambda rng, dt: (
        np.tril(rng.standard_normal((n, n)), -1) + np.diag(rng.uniform(1.0, 2.0, n))
    ).astype(dt))


def _factor(m, a):
    """The Cholesky factor of a's symmetric part (so that finite differences, which move
    one entry at a time, see the gradient torch's formula gives)."""
    return m.linalg.cholesky((a + a.mT) / 2)


def bessel(name):
    return lambda m, a: getattr(m.special, name)(a)


CASES = [
    # -- special functions ---------------------------------------------------------------
    OpCase("erfcx", lambda m, a: m.special.erfcx(a), [In((3, 4))], dtypes=F64),
    OpCase("erfcx", lambda m, a: m.special.erfcx(a), [uniform(40, low=-6.0, high=60.0)],
           "wide", dtypes=F64, atol=0, rtol=1e-6, grad=False),
    OpCase("erfcx", lambda m, a: m.special.erfcx(a), [uniform(40, low=-2.0, high=30.0)],
           "gradient", dtypes=("float64",)),
    OpCase("erfcx", lambda m, a: m.special.erfcx(a),
           [fixed(EDGES + [-30.0, 1e300, 0.46875, 4.0, 4.1])], "special", dtypes=("float64",),
           grad=False),
    OpCase("erfcx", lambda m, a: m.special.log_ndtr(a), [uniform(3, 5, low=-40.0, high=6.0)],
           "log_ndtr", dtypes=F64),
    OpCase("erfcx", lambda m, a: m.special.log_ndtr(a), [fixed(EDGES + [-1.0, -1e10, 40.0])],
           "log_ndtr-special", dtypes=F64, grad=False),
    OpCase("erfc", lambda m, a: m.special.ndtr(a) + m.special.ndtr(a.int()),
           [In((3, 4))], "ndtr", dtypes=ALL),
    OpCase("ndtri", lambda m, a: m.special.ndtri(a), [uniform(3, 4, low=0.01, high=0.99)],
           dtypes=F64, atol=1e-4),
    OpCase("ndtri", lambda m, a: m.special.ndtri(a),
           [fixed([np.nan, 0.0, 1.0, -0.5, 1.5, 1e-300, 1e-30, 1e-12, 0.5, 1 - 1e-9])],
           "special", dtypes=("float64",), grad=False, atol=0, rtol=1e-12),
    OpCase("bessel_i", bessel("i0"), [uniform(4, 5, low=-40.0, high=40.0)], "i0", dtypes=F64,
           atol=0, rtol=1e-6, grad=False),
    OpCase("bessel_i", lambda m, a: m.i0(a) + a.i0() + a.clone().i0_(), [In((3, 4))],
           "i0-torch", dtypes=ALL),
    OpCase("bessel_i", bessel("i0e"), [uniform(20, low=-80.0, high=80.0)], "i0e",
           dtypes=ALL),
    OpCase("bessel_i", bessel("i1"), [uniform(20, low=-40.0, high=40.0)], "i1", dtypes=F64,
           atol=0, rtol=1e-6, grad=False),
    OpCase("bessel_i", lambda m, a: m.special.i1(a) * m.special.i0(a),
           [uniform(20, low=-8.0, high=8.0)], "gradient", dtypes=("float64",)),
    OpCase("bessel_i", bessel("i1e"), [uniform(20, low=-80.0, high=80.0)], "i1e",
           dtypes=ALL),
    OpCase("bessel_i", lambda m, a: (m.special.i1(a), m.special.i1e(a), m.special.i0e(a)),
           [fixed([0.0, -1.0, 2.0])], "at-0"),
    OpCase("bessel_i", lambda m, a: (m.special.i0(a), m.special.i1(a), m.special.i0e(a),
                                     m.special.i1e(a)),
           [fixed(EDGES + [700.0, -710.0, 1e300, 30.0, 30.5])], "special", dtypes=("float64",),
           grad=False, atol=0, rtol=1e-12),
    OpCase("bessel_i", lambda m, a: m.special.i1(a), [In((5,), "int", -4, 4)], "int",
           grad=False),
    OpCase("bessel_j", lambda m, a: (m.special.bessel_j0(a), m.special.bessel_j1(a)),
           [uniform(60, low=-40.0, high=40.0)], "float32", grad=False),
    # (float64 where torch's own is good to 1e-12: off by up to 4e-7 for |x| in [2.8, 14.5])
    OpCase("bessel_j", lambda m, a: (m.special.bessel_j0(a), m.special.bessel_j1(a),
                                     m.special.bessel_j0(a * 20 + a.sign() * 15),
                                     m.special.bessel_j1(-a * 30 - a.sign() * 15)),
           [uniform(40, low=-2.5, high=2.5)], "float64", dtypes=("float64",), grad=False),
    OpCase("bessel_j", lambda m, a: (m.special.bessel_j0(a), m.special.bessel_j1(a)),
           [fixed(EDGES + [1e5, 1e10, 25.0, -25.0001])], "special", dtypes=("float64",),
           grad=False),
    OpCase("bessel_j", lambda m, a: m.special.bessel_j0(a) + m.special.bessel_j1(a),
           [In((5,), "int", -3, 3)], "int", grad=False),
    OpCase("zeta", lambda m, a, b: m.special.zeta(a, b),
           [In((3, 1), "custom", grad=False, fn=lambda rng, dt: rng.uniform(1.5, 6, (3, 1))
               .astype(dt)), In((4,), "pos")], dtypes=F64),
    OpCase("zeta", lambda m, a: m.special.zeta(3.0, a) + m.special.zeta(a + 1, 2.0),
           [uniform(5, low=0.5, high=20.0)], "numbers", dtypes=F64, grad=False),
    OpCase("zeta", lambda m, a, b: m.special.zeta(a, b),
           [fixed([2.0, 1.0, 0.5, 3.0, 3.0, 2.5, np.nan, 2.0, 4.0, np.inf]),
            fixed([1.0, 1.0, 1.0, -2.0, -2.5, -2.5, 1.0, np.inf, 1e-3, 2.0])],
           "special", dtypes=F64, grad=False, atol=0, rtol=1e-12),
    OpCase("xlog1py", lambda m, a, b: m.special.xlog1py(a, b), [In((3, 4)), In((4,), "pos")],
           dtypes=ALL),
    OpCase("xlog1py", lambda m, a, b: m.special.xlog1py(a, b),
           [fixed([0.0, 0.0, 0.0, 1.0, -2.0, 0.0, 3.0]),
            fixed([-1.0, np.nan, np.inf, -1.0, np.inf, -2.0, 1e-20])],
           "zeros", dtypes=F64, grad=False),
    OpCase("xlog1py", lambda m, a: m.special.xlog1py(2, a) + m.special.xlog1py(a, 3),
           [In((3,), "pos")], "numbers"),
    OpCase("sin", lambda m, a: m.sinc(a) + a.sinc() + a.clone().sinc_(), [In((3, 4))],
           "sinc", dtypes=ALL),
    OpCase("sin", lambda m, a: m.special.sinc(a), [fixed([0.0, 0.5, -0.0, 1e-20])],
           "sinc-at-0", dtypes=F64),
    OpCase("sin", lambda m, a: m.sinc(a), [fixed(EDGES + [1.0, -2.5])], "sinc-special",
           dtypes=F64, grad=False),
    OpCase("entr", lambda m, a: m.special.entr(a), [uniform(3, 4, low=0.1, high=3.0)],
           dtypes=ALL),
    OpCase("entr", lambda m, a: m.special.entr(a), [fixed(EDGES + [-1.0, 0.5])],
           "special", dtypes=F64, grad=False),
    OpCase("entr", lambda m, a: m.special.entr(a), [fixed([0.0, -1.0, 0.5, 2.0, -0.0])],
           "gradient-at-and-below-0", dtypes=F64, gradcheck=False),   # (inf, NaN: torch's)
    OpCase("lgamma", lambda m, a: m.mvlgamma(a, 3) + m.special.multigammaln(a, 1) + a.mvlgamma(2),
           [uniform(3, 4, low=1.1, high=8.0)], "mvlgamma", dtypes=F64),
    OpCase("sigmoid", lambda m, a: m.special.expit(a) + m.special.logit(m.sigmoid(a))
           + m.special.gammaln(a.abs() + 1) + m.special.psi(a.abs() + 1), [In((3, 4))],
           "special-aliases"),
    OpCase("softmax", lambda m, a: m.special.softmax(a, 1) + m.special.log_softmax(a, 0)
           + m.special.logsumexp(a, 1, keepdim=True) + m.special.round(a * 10),
           [In((3, 4))], "special-aliases", grad=False),
    # -- float bits ---------------------------------------------------------------------
    OpCase("signbit", lambda m, a, b: m.copysign(a, b) + a.copysign(-0.0) + a.copysign(2),
           [away(3, 4), In((4,), grad=False)], "copysign", dtypes=ALL),
    OpCase("signbit", lambda m, a, b: m.copysign(a, b),
           [fixed(EDGES + [1.0, -2.0]), fixed([-1.0, 1.0, -0.0, 0.0, -np.inf, np.inf, -0.0])],
           "copysign-special", dtypes=F64, grad=False),
    OpCase("signbit", lambda m, a: m.copysign(a, -1) + a.copysign(m.tensor([1, -1, 0])),
           [In((3,), "int", -3, 3)], "copysign-int", grad=False),
    OpCase("signbit", lambda m, a, b: (a * 1).copysign_(b), [In((2, 3)), In((3,), grad=False)],
           "copysign_"),
    OpCase("nextafter", lambda m, a, b: m.nextafter(a, b), [In((3, 4)), In((4,))], dtypes=ALL),
    OpCase("nextafter", lambda m, a, b: m.nextafter(a, b),
           [fixed(EDGES + [1.0, -1.0, 1.0]), fixed([0.0, 1.0, 1.0, 1.0, -1.0, 1.0, 0.0, 1.0])],
           "special", dtypes=ALL, grad=False),
    OpCase("nextafter", lambda m, a, b: (a * 1).nextafter_(b) - a.nextafter(b),
           [In((4,)), In((4,))], "method", dtypes=F64),
    OpCase("frexp", lambda m, a: m.frexp(a).mantissa * 3 + a.frexp()[1], [In((3, 4))],
           dtypes=ALL),
    OpCase("frexp", lambda m, a: m.frexp(a),
           [fixed([0.0, -0.0, 1.0, 0.5, -2.0, 3.3, 1e-3, -1e30, 7e-39, 65504.0])],
           "special", dtypes=F64, grad=False),
    OpCase("frexp", lambda m, a: m.ldexp(m.frexp(a * 5)[0].round(), m.frexp(a * 5)[1]),
           [In((5,))], "roundtrip", dtypes=F64, grad=False),
    # -- selections ----------------------------------------------------------------------
    OpCase("mode", lambda m, a: m.mode(a), [ties(4, 7)], dtypes=ALL, gradcheck=False),
    OpCase("mode", lambda m, a: a.mode(0, keepdim=True), [ties(6, 3)], "dim0",
           gradcheck=False),
    OpCase("mode", lambda m, a: m.mode(a, 1), [In((3, 5), "int", 0, 3)], "int", grad=False),
    OpCase("mode", lambda m, a: m.mode(a.sum()), [In((3,))], "0-d"),
    OpCase("nanmedian", lambda m, a: m.nanmedian(a, 1), [with_nans(4, 6)], dtypes=ALL),
    OpCase("nanmedian", lambda m, a: a.nanmedian(0, keepdim=True), [with_nans(5, 3)], "dim0"),
    OpCase("nanmedian", lambda m, a: m.nanmedian(a) + a[1:].nanmedian(), [with_nans(3, 4)],
           "all"),
    OpCase("nanmedian", lambda m, a: m.nanmedian(a, -1), [In((3, 4), "int", 0, 9)], "int",
           grad=False),
    OpCase("nanmedian", lambda m, a: (m.nanmedian(a, 1).values, m.nanmedian(a[:, :0, 0])),
           [fixed([[[np.nan]] * 4] * 2)], "all-nan", dtypes=F64, grad=False),
    OpCase("argsort", lambda m, a: m.msort(a) + a.msort(), [In((4, 3), "distinct")], "msort"),
    # -- compositions ------------------------------------------------------------------------
    OpCase("sum", lambda m, y, x: (m.trapezoid(y), m.trapezoid(y, x, dim=0),
                                   m.trapezoid(y, dx=0.5, dim=0), m.trapz(y, y * x[0]),
                                   m.trapz(y, dim=0)),
           [In((3, 5)), In((3,))], "trapezoid", dtypes=F64),
    OpCase("sum", lambda m, y: (m.trapezoid(y), m.trapezoid(y[:, :1]), m.trapezoid(y[:, :0])),
           [In((2, 3), "int", 0, 9)], "trapezoid-int", grad=False),
    OpCase("cumsum", lambda m, y, x: (m.cumulative_trapezoid(y, x, dim=0),
                                      m.cumulative_trapezoid(y, dx=2.0)),
           [In((4, 3)), In((4, 1))], "cumulative_trapezoid", dtypes=F64),
    OpCase("cat", lambda m, a, b, c: m.block_diag(a, b, c, m.tensor(2.0), m.tensor([1, 2])),
           [In((2, 3)), In((4,)), In((3, 1))], "block_diag", dtypes=F64),
    OpCase("cat", lambda m: m.block_diag(m.tensor([[1, 2]]), m.tensor(3)), [],
           "block_diag-int", grad=False, extra={"runs_no_op": "no inputs: traced nothing"}),
    OpCase("stack", lambda m, a, b, c: m.cartesian_prod(a, b, c), [In((3,)), In((2,)), In((4,))],
           "cartesian_prod", dtypes=F64),
    OpCase("stack", lambda m, a: (m.cartesian_prod(a, a), m.cartesian_prod(a)),
           [In((3,), "int")], "cartesian_prod-int", grad=False),
    OpCase("norm", lambda m, a: (m.renorm(a, 2, 0, 1.0), a.renorm(1, 1, 1.5),
                                 a.renorm(3, -1, 100.0), (a * 1).renorm_(2, 1, 0.5)),
           [In((3, 4))], "renorm", dtypes=F64),
    OpCase("index_put", lambda m, a, b: (a.put(m.tensor([0, -1, 5]), b),
                                         m.put(a, m.tensor([[1, 1], [7, 1]]), b[:2].repeat(2),
                                               accumulate=True),
                                         (a * 1).put_(m.tensor([2]), b[1:2])),
           [In((3, 4)), In((3,))], "put", dtypes=F64),
    OpCase("prod", lambda m, a, b: (a.index_reduce(0, m.tensor([0, 2, 0, 4]), b, "prod"),
                                    a.index_reduce(0, m.tensor([1, 1, 3, 0]), b, "mean",
                                                   include_self=False)),
           [In((5, 3)), In((4, 3))], "index_reduce", dtypes=F64),
    OpCase("scatter_reduce",
           lambda m, a, b: (a.index_reduce(1, m.tensor([0, 2, 0]), b, "amax"),
                            (a * 1).index_reduce_(1, m.tensor([2, 2, 1]), b, "amin",
                                                  include_self=False)),
           [In((2, 4), "distinct"), In((2, 3))], "index_reduce-amax",
           dtypes=F64),
    OpCase("linalg_solve", lambda m, b, a: m.cholesky_solve(b, _factor(m, a))
           + m.cholesky_solve(b, _factor(m, a).mT, upper=True), [In((3, 2)), spd(3, 3)],
           "cholesky_solve", dtypes=F64),
    OpCase("linalg_solve", lambda m, b, u: m.cholesky_solve(b, u) + b.cholesky_solve(u),
           [In((2, 4, 2)), lower_factor(4)], "cholesky_solve-factor", dtypes=F64,
           gradcheck=False),   # (torch's gradient treats the factor as a full matrix)
    OpCase("linalg_solve", lambda m, a: (m.cholesky_inverse(_factor(m, a)),
                                         _factor(m, a).mT.cholesky_inverse(True)),
           [spd(3, 3)], "cholesky_inverse", dtypes=F64),
]

# -- the next names of the missing list: inverse hyperbolics, aliases, products --------------
CASES += [
    OpCase("asinh", lambda m, a: m.asinh(a) + a.arcsinh(), [In((3, 4))],
           dtypes=ALL),
    OpCase("asinh", lambda m, a: (a * 1).asinh_() + (a.abs() + 1).acosh_() + (a / 9).atanh_(),
           [In((3, 4))], "in-place", grad=False),   # (torch has no gradient for them)
    OpCase("asinh", lambda m, a: m.arcsinh(a), [fixed(EDGES + [1e300, -1e-300])], "special",
           dtypes=("float64",), grad=False),
    OpCase("acosh", lambda m, a: m.acosh(a) + a.arccosh(),
           [uniform(3, 4, low=1.1, high=9.0)], dtypes=ALL),
    OpCase("acosh", lambda m, a: m.arccosh(a), [fixed(EDGES + [1.0, 0.5, -2.0])], "special",
           dtypes=F64, grad=False),
    OpCase("acosh", lambda m, a: m.acosh(a), [In((4,), "int", 1, 9)], "int", grad=False),
    OpCase("atanh", lambda m, a: m.atanh(a) + a.arctanh(),
           [In((3, 4), "unit")], dtypes=ALL),
    OpCase("atanh", lambda m, a: m.arctanh(a), [fixed(EDGES + [1.0, -1.0, 2.0])], "special",
           dtypes=F64, grad=False),
    OpCase("mul", lambda m, a: (m.deg2rad(a), a.rad2deg(), a.clone().deg2rad_()),
           [In((3, 4))], "deg2rad", dtypes=ALL),
    OpCase("mul", lambda m, a: (m.deg2rad(a), m.rad2deg(a)), [In((4,), "int", -9, 9)],
           "deg2rad-int", grad=False),
    OpCase("where", lambda m, a, b: (m.fmax(a, b), a.fmin(b), a.fmax(b * 2)),
           [In((3, 4)), In((4,))], "fmax", dtypes=ALL),
    OpCase("where", lambda m, a, b: (m.fmax(a, b), m.fmin(a, b)),
           [fixed([np.nan, np.nan, 1.0, -np.inf, 2.0]), fixed([np.nan, 1.0, np.nan, 0.0, 2.0])],
           "fmax-nan", dtypes=F64, grad=False),
    OpCase("where", lambda m, a, b: (m.fmax(a, b), m.fmin(a, b)),
           [In((3,), "int", 0, 4), In((3,), "int", 0, 4)], "fmax-int", grad=False),
    OpCase("pow", lambda m, a, b: (m.float_power(a, b), a.float_power(2), m.float_power(2, a)),
           [In((3,), "pos"), In((3,))], "float_power"),
    OpCase("pow", lambda m, a: m.float_power(a, 3), [In((3,), "int", -3, 4)],
           "float_power-int", grad=False),
    OpCase("gt", lambda m, a, b: (m.greater(a, b), a.greater_equal(b), m.less(a, 0.1),
                                  a.less_equal(b), m.not_equal(a, b), (a - b).sgn()),
           [In((3, 4)), In((4,))], "aliases", grad=False),
    OpCase("div", lambda m, a, b: (m.divide(a, b), a.divide(b, rounding_mode="floor"),
                                   m.sgn(a), m.positive(a)),
           [In((3, 4)), away(4)], "divide-aliases"),
    OpCase("isinf", lambda m, a: (m.isposinf(a), a.isneginf(), m.isreal(a)),
           [fixed(EDGES + [1.0, -2.0])], "isposinf", dtypes=F64, grad=False),
    OpCase("einsum", lambda m, a, b: (m.inner(a, b), m.inner(a[0], b[1]), m.inner(a, b[0, 0])),
           [In((2, 3)), In((4, 3))], "inner", dtypes=F64),
    OpCase("matmul", lambda m, a, b, c: (m.ger(a, b), m.vdot(a, c), m.addr(c[:2, None] * 0 + 1,
                                                                          a[:2], b, alpha=2)),
           [In((3,)), In((4,)), In((3,))], "ger-vdot-addr", dtypes=F64),
    OpCase("matmul", lambda m, i, a, v: (m.addmv(i, a, v), i.addmv(a, v, beta=0.5, alpha=3),
                                         (i * 1).addmv_(a, v),
                                         m.addr(i[:, None], v[:3], v, beta=2)),
           [In((3,)), In((3, 4)), In((4,))], "addmv", dtypes=F64),
    OpCase("matmul", lambda m, i, a, v: (m.addmv(i * float("nan"), a, v, beta=0),
                                         m.addr(i[:, None] * float("inf"), i, v, beta=0)),
           [In((3,)), In((3, 4)), In((4,))], "addmv-beta0", dtypes=F64, grad=False),
    OpCase("matmul", lambda m, a: (m.matrix_power(a, 3), a.matrix_power(1),
                                   m.matrix_power(a, -2)),
           [In((2, 3, 3), "custom", fn=lambda rng, dt: (rng.standard_normal((2, 3, 3))
                                                         + 3 * np.eye(3)).astype(dt))],
           "matrix_power", dtypes=F64),
    OpCase("matmul", lambda m, a: m.matrix_power(a, 0) + m.matrix_power(a, 2),
           [In((3, 3))], "matrix_power-0", grad=False),
    OpCase("where", lambda m, a: (m.diagflat(a), a.diagflat(-1)), [In((2, 2))], "diagflat",
           dtypes=F64),
    OpCase("norm", lambda m, a, b: (m.dist(a, b), a.dist(b, 3), m.dist(a, b, 1)),
           [In((3, 4)), In((4,))], "dist", dtypes=F64),
    OpCase("mean", lambda m, a: (m.cov(a), a.cov(correction=0), m.cov(a[0]), m.corrcoef(a),
                                 a[1].corrcoef()),
           [In((3, 6))], "cov", dtypes=F64),
    OpCase("mean", lambda m, a: (m.cov(a), m.corrcoef(a)), [In((2, 5), "int", 0, 9)],
           "cov-int", grad=False),
]
