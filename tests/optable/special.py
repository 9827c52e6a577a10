"""Rows for ops/special.py: the gamma family, igamma, erfinv, xlogy (primitives), signbit,
gcd, lcm, isin, histc (no gradient), and the composites logit and heaviside."""
import numpy as np

from . import In, OpCase
from .elementwise import SPECIAL, fixed, uniform

ALL = ("float32", "float64", "float16", "bfloat16")
F64 = ("float32", "float64")


def off_poles(*shape):
    """Floats in (-4, 6) at least 0.1 from the poles 0, -1, -2, -3."""
    def make(rng, dt):
        a = rng.uniform(-4.0, 6.0, shape)
        return np.where(np.abs(a - np.round(a)) < 0.1, a + 0.3, a).astype(dt)
    return In(shape, "custom", fn=make)


def signed_zeros_ints(*shape):
    return In(shape, "custom", grad=False,
              fn=lambda rng, dt: (rng.integers(-2, 3, shape) * rng.choice([1.0, -1.0], shape)
                                  ).astype(dt))


CASES = [
    OpCase("lgamma", lambda m, a: m.lgamma(a), [off_poles(3, 5)], dtypes=ALL),
    OpCase("lgamma", lambda m, a: a.lgamma() + a.clone().lgamma_(), [In((4,), "pos")],
           "method"),
    OpCase("lgamma", lambda m, a: m.lgamma(a),
           [fixed([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, -2.5, 1e-30, 1e30, 1.0, 2.0])],
           "special", dtypes=F64, grad=False),
    OpCase("lgamma", lambda m, a: m.lgamma(a), [In((2, 3), "int", -2, 6)], "int", grad=False),
    # (float32 only: torch's trigamma, polygamma(1), is good to 1e-9 where ours is to 1e-15)
    OpCase("polygamma", lambda m, a: m.digamma(a), [off_poles(2, 7)], "digamma",
           dtypes=("float32", "float16", "bfloat16")),
    OpCase("polygamma", lambda m, a: a.digamma() * a.clone().digamma_(), [In((5,), "pos")],
           "digamma-method"),
    OpCase("polygamma", lambda m, a: m.digamma(a),
           [fixed([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, -2.5, 1e-30, 1e30, 15.5])],
           "digamma-special", dtypes=F64, grad=False),
    OpCase("polygamma", lambda m, a: m.polygamma(1, a), [In((3, 2), "pos")], "trigamma"),
    OpCase("polygamma", lambda m, a: a.polygamma(2) + m.polygamma(3, a),
           [uniform(4, low=0.3, high=12.0)], "n", atol=1e-4),
    OpCase("polygamma", lambda m, a: m.polygamma(1, a), [off_poles(6)], "trigamma-negative",
           dtypes=("float32",), atol=1e-3),
    OpCase("polygamma", lambda m, a: m.digamma(a), [In((4,), "int", 1, 9)], "int",
           grad=False),
    # (differentiable in x only, as in torch; float64 within 1e-9: torch's is good to ~1e-9
    # near a = x where ours is to 1e-13)
    OpCase("igamma", lambda m, a, x: m.igamma(a, x),
           [In((3, 4), "pos", grad=False), uniform(4, low=0.1, high=6.0)], dtypes=F64,
           atol=1e-6),
    OpCase("igamma", lambda m, a, x: m.igamma(a, x),
           [fixed([0.0, -1.0, 2.0, 2.0, 0.0, 1.0, np.inf, 2.0, 0.0, 30.0, 0.01]),
            fixed([1.0, 1.0, -1.0, np.nan, 0.0, np.inf, 1.0, 0.0, np.inf, 29.0, 1e-6])],
           "special", dtypes=F64, grad=False),
    OpCase("erfinv", lambda m, a: m.erfinv(a), [In((3, 4), "unit")], dtypes=ALL),
    OpCase("erfinv", lambda m, a: a.erfinv() - a.clone().erfinv_(),
           [uniform(64, low=-0.999999, high=0.999999)], "wide", dtypes=F64, atol=0,
           rtol=1e-6),
    OpCase("erfinv", lambda m, a: m.erfinv(a),
           [fixed([np.nan, 1.0, -1.0, 1.5, -2.0, 0.0, -0.0, 1 - 1e-7, 1e-30])], "special",
           dtypes=F64, grad=False),
    OpCase("erfinv", lambda m, a: m.erfinv(a), [In((3,), "int", -1, 2)], "int", grad=False),
    OpCase("xlogy", lambda m, a, b: m.xlogy(a, b), [In((3, 4)), In((4,), "pos")],
           dtypes=ALL),
    OpCase("xlogy", lambda m, a, b: a.xlogy(b) + a.clone().xlogy_(b),
           [In((2, 3)), In((3,), "pos")], "method-broadcast"),
    OpCase("xlogy", lambda m, a, b: m.xlogy(a, b),
           [fixed([0.0, 0.0, 0.0, 1.0, -2.0, 0.0, 3.0]),
            fixed([0.0, np.nan, np.inf, 0.0, np.inf, -1.0, 0.5])],
           "zeros", dtypes=F64, grad=False),
    OpCase("xlogy", lambda m, a: m.xlogy(2, a), [In((3,), "pos")], "number-x"),
    OpCase("xlogy", lambda m, a: m.xlogy(a, 3) + a.xlogy(2.5), [In((2, 2))], "number-y"),
    OpCase("xlogy", lambda m, a, b: m.xlogy(a, b), [In((3,), "int"), In((3,), "int", 1, 5)],
           "int", grad=False),
    OpCase("log1p", lambda m, a: m.logit(a), [uniform(3, 4, low=0.05, high=0.95)], "logit",
           dtypes=F64),
    OpCase("log1p", lambda m, a: a.logit(eps=0.2), [uniform(7, low=0.0, high=1.0)],
           "logit-eps", atol=1e-4),
    OpCase("log1p", lambda m, a: m.logit(a), [fixed([0.0, 1.0, 0.5, 2.0, -1.0])],
           "logit-special", dtypes=F64, grad=False),
    OpCase("log1p", lambda m, a: a.clone().logit_(1e-3), [uniform(5, low=0.1, high=0.9)],
           "logit_"),
    OpCase("where", lambda m, a, b: m.heaviside(a, b), [signed_zeros_ints(3, 4), In((4,))],
           "heaviside", dtypes=F64, grad=False),
    OpCase("where", lambda m, a: a.heaviside(m.tensor(7)), [In((5,), "int", -2, 3)],
           "heaviside-int", grad=False),
    OpCase("signbit", lambda m, a: m.signbit(a), [SPECIAL], dtypes=F64 + ("float16",),
           grad=False),   # (bfloat16: torch and ml_dtypes cast NaN with different signs)
    OpCase("signbit", lambda m, a: a.signbit(), [signed_zeros_ints(2, 3)], "zeros",
           grad=False),
    OpCase("signbit", lambda m, a: m.signbit(a), [In((4,), "int", -3, 3)], "int",
           grad=False),
    OpCase("gcd", lambda m, a, b: m.gcd(a, b), [In((3, 4), "int", -20, 20),
                                                In((4,), "int", -12, 12)], grad=False),
    OpCase("gcd", lambda m, a, b: a.gcd(b) + a.clone().gcd_(b),
           [In((5,), "int", 0, 30, dtype="int32"), In((5,), "int", 0, 30, dtype="int32")],
           "int32", grad=False),
    OpCase("lcm", lambda m, a, b: m.lcm(a, b), [In((2, 3), "int", -9, 9),
                                                In((2, 1), "int", -9, 9)], grad=False),
    OpCase("lcm", lambda m, a: a.lcm(m.tensor(6)), [In((4,), "int", 0, 9)], "0-d",
           grad=False),
    OpCase("isin", lambda m, a, b: m.isin(a, b), [In((3, 4), "int", 0, 9),
                                                  In((5,), "int", 0, 9)], grad=False),
    OpCase("isin", lambda m, a, b: m.isin(a, b, invert=True), [In((2, 3), "int", 0, 4),
                                                            In((2, 2), "int", 0, 4)],
           "invert", grad=False),
    OpCase("isin", lambda m, a: m.isin(a, 2), [In((5,), "int", 0, 4)], "number",
           grad=False),
    OpCase("isin", lambda m, a, b: m.isin(a, b), [In((4,), "int", -2, 3),
                                                  In((3,), "int", -2, 3)], "negative",
           grad=False),
    OpCase("histc", lambda m, a: m.histc(a, 7), [In((50,))], dtypes=F64, grad=False),
    OpCase("histc", lambda m, a: a.histc(5, -1, 1), [In((4, 6))], "range", dtypes=F64,
           grad=False),
    OpCase("histc", lambda m, a: m.histc(a, bins=3), [fixed([2.0, 2.0, 2.0])], "constant",
           grad=False),
]
