"""Rows for the reductions (dualgraph/ops/reduce.py); ``sum``'s basic rows are in core.py."""
import numpy as np

from . import In, OpCase

ALL_FLOATS = ("float32", "float64", "float16", "bfloat16")
HALVES = ("float32", "float16", "bfloat16")


def D(*shape):
    """Distinct values: the arg-reductions and max/min gradients are unambiguous."""
    return In(shape, "distinct")


def custom(fn, grad=True):
    return In((), "custom", fn=fn, grad=grad)


def _ties(rng, dt):
    """Rows whose maximum (and minimum) appears twice: torch splits the gradient evenly."""
    return np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, -1.0, -1.0]], dtype=dt)


def _one_zero(rng, dt):
    """A zero in one row, two zeros in another, none in the third (prod's gradient cases)."""
    a = rng.uniform(0.5, 2.0, (3, 4))
    a[0, 1] = 0.0
    a[1, 0] = a[1, 3] = 0.0
    return a.astype(dt)


def _huge(rng, dt):
    """Values near 1000: exp overflows unless the max is factored out."""
    return (rng.standard_normal((3, 5)) * 10 + 1000).astype(dt)


def _zero_rows(rng, dt):
    a = rng.standard_normal((3, 4))
    a[1] = 0.0
    return a.astype(dt)


def _mid_nan(rng, dt):
    """NaNs along dim 1 of some columns (after a larger value, and first), ties in others:
    max and min give the NaN and its first index, as torch."""
    a = rng.integers(0, 3, (2, 4, 3)).astype(dt)
    a[0, 2, 0] = a[1, 0, 1] = a[1, 3, 1] = np.nan
    return a


def _along_grad(m, a, v):
    """d max(a, 1) / da (or d min(a, 0, keepdim) for 2-D ``a``) contracted with ``v``, with
    create_graph: its gradients with respect to ``v`` and ``a`` are the row's checks."""
    with m.enable_grad():
        if not a.requires_grad:
            a.requires_grad_()
        y = a.max(1)[0] if a.ndim == 3 else a.min(0, keepdim=True)[0]
        return m.autograd.grad(y, a, v.reshape(y.shape), create_graph=True)[0]


def double(f):
    """A row function whose output is the gradient of ``sum(f(x) ** 3)`` (taken with
    create_graph), so the row's gradient check tests the VJP's own derivative."""
    def fn(m, a, *rest):
        x = a if a.requires_grad else a.detach().requires_grad_()
        with m.enable_grad():
            y = f(m, x, *rest)
            y = y[0] if isinstance(y, tuple) else y
            return m.autograd.grad((y ** 3).sum(), x, create_graph=True)[0]
    return fn


CASES = [
    # sum (more rows in core.py)
    OpCase("sum", lambda m, a: a.sum(-1), [In((2, 3, 4))], "negdim", dtypes=ALL_FLOATS),
    OpCase("sum", lambda m, a: m.sum(a, (0, 2), keepdim=True), [In((2, 3, 4))],
           "tuple-keepdim"),
    OpCase("sum", lambda m, a: m.sum(a, dtype=m.float64), [In((3, 4))], "dtype"),
    # (a few elements per result over a big array: slices added in turn)
    OpCase("sum", lambda m, a: a.sum(1), [In((70, 3, 40))], "few-mid",
           dtypes=("float32", "float64"), gradcheck=False),
    OpCase("sum", lambda m, a: a.sum(-1, keepdim=True), [In((600, 8))], "few-last",
           dtypes=("float32", "float64"), gradcheck=False),
    OpCase("sum", lambda m, a: a.mT.sum((0, 2)), [In((50, 2, 30, 2))], "few-strided",
           gradcheck=False),
    OpCase("sum", lambda m, a: a.sum(1), [In((3, 4), "bool")], "bool", grad=False),

    # mean
    OpCase("mean", lambda m, a: m.mean(a), [In((3, 4))], "all", dtypes=ALL_FLOATS),
    OpCase("mean", lambda m, a: a.mean(-1, keepdim=True), [In((2, 3, 4))], "keepdim",
           dtypes=ALL_FLOATS),
    OpCase("mean", lambda m, a: a.mean((0, -1)), [In((2, 3, 4))], "dims"),
    OpCase("mean", lambda m, a: a.mean(dim=0, dtype=m.float32), [In((3, 4), "int")],
           "int-dtype", grad=False),

    # prod
    OpCase("prod", lambda m, a: m.prod(a), [In((2, 3), "pos")], "all", dtypes=HALVES),
    OpCase("prod", lambda m, a: a.prod(-1, keepdim=True), [In((3, 4))], "keepdim",
           dtypes=("float32", "float64")),
    OpCase("prod", lambda m, a: a.prod(1), [custom(_one_zero)], "zeros"),
    OpCase("prod", lambda m, a: a.prod(0), [In((3, 4), "int", 1, 4, dtype="int32")], "int",
           grad=False),

    # amax / amin (and full max / min, which split ties the same way)
    OpCase("amax", lambda m, a: m.amax(a, (0, -1)), [D(2, 3, 4)], "dims", dtypes=ALL_FLOATS),
    OpCase("amax", lambda m, a: a.amax(1, keepdim=True), [D(3, 4)], "keepdim"),
    OpCase("amax", lambda m, a: a.amax(1), [custom(_ties)], "ties", gradcheck=False),
    OpCase("amax", lambda m, a: m.max(a), [D(3, 4)], "max-full", dtypes=ALL_FLOATS),
    OpCase("amax", lambda m, a: a.max(), [custom(_ties)], "max-full-ties", gradcheck=False),
    OpCase("amax", lambda m, a: a.max(), [In((3, 4), "int")], "int", grad=False),
    OpCase("amin", lambda m, a: m.amin(a, -1), [D(3, 4)], dtypes=ALL_FLOATS),
    OpCase("amin", lambda m, a: a.min(), [custom(_ties)], "min-full-ties", gradcheck=False),
    OpCase("amax", lambda m, a: a.amax(1), [custom(_mid_nan)], "mid-nan", grad=False),
    OpCase("amin", lambda m, a: a.amin((0, 2)), [custom(_mid_nan)], "dims-nan", grad=False),

    # max / min along a dim: (values, indices), the gradient goes to the index
    OpCase("max", lambda m, a: m.max(a, 1), [D(3, 4)], "dim", dtypes=ALL_FLOATS),
    OpCase("max", lambda m, a: a.max(dim=-1, keepdim=True), [D(2, 3, 4)], "keepdim"),
    OpCase("max", lambda m, a: a.max(0).values * 2, [D(3, 4)], "values"),
    OpCase("max", lambda m, a: a.max(1)[1], [In((3, 4), "int")], "int-indices",
           grad=False),
    OpCase("min", lambda m, a: m.min(a, 0), [D(3, 4)], "dim", dtypes=ALL_FLOATS),
    OpCase("min", lambda m, a: a.min(-2, True), [D(2, 3, 4)], "keepdim"),
    # (a dim before the last: kernels.along's loop for 32- and 64-bit dtypes)
    OpCase("max", lambda m, a: a.max(1), [D(2, 5, 3)], "mid", dtypes=ALL_FLOATS),
    OpCase("max", lambda m, a: a.transpose(0, 2).max(1, keepdim=True), [D(3, 4, 5)],
           "mid-strided", dtypes=("float32", "float64")),
    OpCase("min", lambda m, a: m.min(a, 0), [D(7, 2, 3)], "first", dtypes=("float64",)),
    OpCase("max", lambda m, a: a.max(1), [In((3, 6, 5), "int", 0, 3)], "mid-int-ties",
           grad=False),
    OpCase("min", lambda m, a: a.min(1), [In((3, 6, 5), "int", 0, 3, dtype="int32")],
           "mid-int32-ties", grad=False),
    OpCase("max", lambda m, a: a.max(1), [custom(_mid_nan)], "mid-nan", grad=False),
    OpCase("min", lambda m, a: a.min(0), [custom(_mid_nan)], "mid-nan", grad=False),
    OpCase("along_backward", _along_grad, [D(2, 5, 3), In((2, 3))], "max",
           dtypes=("float32", "float64")),
    OpCase("along_backward", _along_grad, [D(4, 3), In((3,))], "min-keepdim",
           dtypes=("float32", "float64")),

    OpCase("maximum", lambda m, a, b: m.max(a, b), [In((3, 4)), In((4,))], "max-tensor"),
    OpCase("minimum", lambda m, a, b: a.min(b), [In((3, 4)), In((3, 1))], "min-tensor"),

    # median: the lower median; the gradient goes to its index
    OpCase("median", lambda m, a: m.median(a), [D(3, 4)], "all", dtypes=ALL_FLOATS),
    OpCase("median", lambda m, a: a.median(1), [D(3, 5)], "dim", dtypes=ALL_FLOATS),
    OpCase("median", lambda m, a: a.median(dim=-1, keepdim=True), [D(2, 3, 4)], "keepdim"),
    OpCase("median", lambda m, a: (*a.median(1), a.median()),   # (NaN wins, at its index)
           [In((3, 4), "custom", grad=False, fn=lambda rng, dt: np.array(
               [[1, np.nan, 3, np.nan], [2, 0, 1, 5], [np.nan, 4, 4, 1]], dt))], "nan",
           dtypes=ALL_FLOATS, grad=False),
    OpCase("median", lambda m, a: a.median(0)[0], [In((4, 3), "int", 0, 100)], "int",
           grad=False),

    # argmax / argmin
    OpCase("argmax", lambda m, a: m.argmax(a), [D(3, 4)], "flat", grad=False,
           dtypes=ALL_FLOATS),
    OpCase("argmax", lambda m, a: a.argmax(-1, keepdim=True), [D(2, 3, 4)], "keepdim",
           grad=False),
    OpCase("argmax", lambda m, a: a.argmax(keepdim=True), [D(2, 3)], "flat-keepdim",
           grad=False),
    OpCase("argmax", lambda m, a: a.argmax(0), [In((5, 3), "int", 0, 100)], "int",
           grad=False),
    OpCase("argmin", lambda m, a: m.argmin(a, dim=1), [D(3, 4)], grad=False),
    OpCase("argmin", lambda m, a: a.argmin(), [D(3, 4)], "flat", grad=False),

    # var (one op) / std / var_mean / std_mean (composites; rows under the ops they reach)
    OpCase("var", lambda m, a: m.var(a), [In((3, 4))], "var", dtypes=HALVES),
    OpCase("var", lambda m, a: a.var(1, keepdim=True), [In((3, 4))], "var-keepdim"),
    OpCase("var", lambda m, a: a.var((0, 2), correction=0), [In((2, 3, 4))],
           "var-correction"),
    OpCase("var", lambda m, a: a.var(-1, unbiased=False), [In((3, 4))], "var-unbiased"),
    OpCase("var", lambda m, a: a.var(False), [In((3, 4))], "var-legacy"),
    OpCase("var", lambda m, a: m.std(a, dim=0), [In((3, 4))], "std", dtypes=ALL_FLOATS),
    OpCase("var", lambda m, a: a.std(), [In((3, 4))], "std-all"),
    OpCase("mean", lambda m, a: m.var_mean(a, 1), [In((3, 4))], "var_mean"),
    OpCase("mean", lambda m, a: m.std_mean(a, dim=(0, 1), correction=0), [In((3, 4))],
           "std_mean"),

    # logsumexp
    OpCase("logsumexp", lambda m, a: m.logsumexp(a, 1), [In((3, 4))], dtypes=ALL_FLOATS),
    OpCase("logsumexp", lambda m, a: a.logsumexp((0, -1), keepdim=True), [In((2, 3, 4))],
           "dims"),
    OpCase("logsumexp", lambda m, a: a.logsumexp(-1), [custom(_huge)], "stable",
           dtypes=("float32", "float64")),
    OpCase("logsumexp", lambda m, a: m.logsumexp(a, 0), [In((3, 4), "int")], "int",
           grad=False),

    # norm
    OpCase("norm", lambda m, a: m.norm(a), [In((3, 4))], "fro", dtypes=ALL_FLOATS),
    OpCase("norm", lambda m, a: a.norm(dim=1, keepdim=True), [In((3, 4))], "dim"),
    OpCase("norm", lambda m, a: a.norm(p=1, dim=-1), [In((3, 4))], "p1"),
    OpCase("norm", lambda m, a: a.norm(p=3, dim=(0, 1)), [In((3, 4))], "p3"),
    OpCase("norm", lambda m, a: a.norm(p=0.5), [In((3, 4), "pos")], "p-half"),
    OpCase("norm", lambda m, a: a.norm(p=float("inf"), dim=0), [In((3, 4))], "inf"),
    OpCase("norm", lambda m, a: a.norm(p=-float("inf"), dim=1), [In((3, 4))], "-inf"),
    OpCase("norm", lambda m, a: a.norm(p=0, dim=1), [custom(_zero_rows)], "p0"),
    OpCase("norm", lambda m, a: a.norm(dim=1), [custom(_zero_rows)], "at-zero"),
    OpCase("norm", lambda m, a: m.norm(a, 2, 0, dtype=m.float64), [In((3, 4))], "dtype"),

    # cumsum / cumprod
    OpCase("cumsum", lambda m, a: m.cumsum(a, 1), [In((3, 4))], dtypes=ALL_FLOATS),
    OpCase("cumsum", lambda m, a: a.cumsum(-3), [In((2, 3, 4))], "negdim"),
    OpCase("cumsum", lambda m, a: a.cumsum(0, dtype=m.float64), [In((3, 4))], "dtype"),
    OpCase("cumsum", lambda m, a: a.cumsum(0), [In((3, 4), "int", dtype="int32")], "int",
           grad=False),
    OpCase("cumsum", lambda m, a: a.cumsum(1), [In((3, 4), "bool")], "bool", grad=False),
    OpCase("cumprod", lambda m, a: m.cumprod(a, 1), [In((3, 4), "pos")], dtypes=ALL_FLOATS),
    OpCase("cumprod", lambda m, a: a.cumprod(-1), [In((2, 3))], "signed"),
    OpCase("cumprod", lambda m, a: a.cumprod(0), [In((3, 4), "int", 1, 4)], "int",
           grad=False),

    # all / any / count_nonzero (count_nonzero is sum over ne)
    OpCase("all", lambda m, a: m.all(a), [In((3, 4), "bool")], grad=False),
    OpCase("all", lambda m, a: a.all(1, keepdim=True), [In((3, 4), "bool")], "dim",
           grad=False),
    OpCase("all", lambda m, a: a.all(dim=0), [In((3, 4), "int", 0, 2)], "int", grad=False),
    OpCase("any", lambda m, a: m.any(a, -1), [In((3, 4), "bool")], grad=False),
    OpCase("any", lambda m, a: (a > 1).any(), [In((3, 4))], "all", grad=False),
    OpCase("sum", lambda m, a: m.count_nonzero(a, dim=(0, 1)), [In((3, 4), "int", 0, 2)],
           "count_nonzero", grad=False),
    OpCase("sum", lambda m, a: a.count_nonzero(), [custom(_zero_rows, grad=False)],
           "count_nonzero-float", grad=False),

    # softmax / log_softmax
    OpCase("softmax", lambda m, a: m.softmax(a, -1), [In((3, 4))], dtypes=ALL_FLOATS),
    OpCase("softmax", lambda m, a: a.softmax(dim=0), [In((2, 3, 4))], "dim0"),
    OpCase("softmax", lambda m, a: a.softmax(1), [custom(_huge)], "stable",
           dtypes=("float32", "float64")),
    OpCase("softmax", lambda m, a: m.softmax(a, 1, dtype=m.float64), [In((3, 4))], "dtype"),
    OpCase("log_softmax", lambda m, a: m.log_softmax(a, -1), [In((3, 4))],
           dtypes=ALL_FLOATS),
    OpCase("log_softmax", lambda m, a: a.log_softmax(1), [custom(_huge)], "stable",
           dtypes=("float32", "float64")),
    OpCase("log_softmax", lambda m, a: a.log_softmax(dim=-2), [In((2, 3, 4))], "dim"),

    # second derivatives: the VJPs are written with dualgraph ops, so they differentiate
    OpCase("mean", double(lambda m, x: x.mean(1)), [In((3, 4))], "double"),
    OpCase("prod", double(lambda m, x: x.prod(1)), [In((3, 4), "pos")], "double"),
    OpCase("amax", double(lambda m, x: x.amax(0)), [D(3, 4)], "double"),
    OpCase("max", double(lambda m, x: x.max(1)), [D(3, 4)], "double"),
    OpCase("logsumexp", double(lambda m, x: x.logsumexp(1)), [In((3, 4))], "double"),
    OpCase("norm", double(lambda m, x: x.norm(dim=1)), [In((3, 4))], "double"),
    OpCase("norm", double(lambda m, x: x.norm(p=3, dim=1)), [In((3, 4))], "double-p3"),
    OpCase("cumsum", double(lambda m, x: x.cumsum(1)), [In((3, 4))], "double"),
    OpCase("cumprod", double(lambda m, x: x.cumprod(1)), [In((3, 4), "pos")], "double"),
    OpCase("softmax", double(lambda m, x: x.softmax(1)), [In((3, 4))], "double"),
    OpCase("log_softmax", double(lambda m, x: x.log_softmax(1)), [In((3, 4))], "double"),
]

# `count` is what mean/var divide by when a dim is symbolic; eagerly it is a plain number.
CASES.append(OpCase("count", lambda m, x: (x.sum((0, 2)) / x[0, :, 0].numel())
                    if m.__name__ == "torch" else
                    x.sum((0, 2)) / m.ops.reduce.apply(m.ops.reduce.COUNT, x, dims=(1,)),
                    [In((2, 3, 4))]))


def first_grad(f):
    """d sum(f(a) * v) / da with create_graph: a row for a backward op (its gradient with
    respect to v, and through f's output to a, is a second derivative)."""
    def fn(m, a, v):
        x = a if a.requires_grad else a.detach().requires_grad_()
        with m.enable_grad():
            return m.autograd.grad((f(x) * v).sum(), x, create_graph=True)[0]
    return fn


CASES += [
    OpCase("softmax_backward", first_grad(lambda x: x.softmax(-1)), [In((3, 4)), In((3, 4))],
           dtypes=ALL_FLOATS),
    OpCase("softmax_backward", first_grad(lambda x: x.softmax(0)), [In((3, 4)), In((3, 4))],
           "dim0"),
    OpCase("log_softmax_backward", first_grad(lambda x: x.log_softmax(-1)),
           [In((3, 4)), In((3, 4))], dtypes=ALL_FLOATS),
    OpCase("log_softmax_backward", first_grad(lambda x: x.log_softmax(1)),
           [In((2, 3, 4)), In((2, 3, 4))], "dim1"),
]

# -- nansum / nanmean (composites over where and sum) and logcumsumexp (issue 26's names) ----
def _with_nans(rng, dt):
    a = rng.standard_normal((3, 4))
    a[0, 1] = a[2, 0] = a[2, 3] = np.nan
    return a.astype(dt)


def _spread(rng, dt):
    """Values far apart along the rows (-300 next to 5): log(cumsum(exp)) underflows."""
    return (rng.standard_normal((3, 5)) + np.array([-300.0, 5.0, -40.0, 2.0, 80.0])).astype(dt)


CASES += [
    OpCase("sum", lambda m, a: m.nansum(a), [custom(_with_nans, grad=False)], "nansum",
           dtypes=HALVES + ("float64",), grad=False),
    OpCase("sum", lambda m, a: a.nansum(1, keepdim=True), [In((3, 4))], "nansum-grad"),
    OpCase("sum", lambda m, a: a.nansum(0), [In((3, 4), "int")], "nansum-int", grad=False),
    OpCase("sum", lambda m, a: m.nanmean(a, 1), [custom(_with_nans, grad=False)], "nanmean",
           dtypes=("float32", "float64"), grad=False),
    OpCase("sum", lambda m, a: a.nanmean((0, 1)), [In((2, 3, 4))], "nanmean-grad"),
    OpCase("logcumsumexp", lambda m, a: m.logcumsumexp(a, 1), [In((3, 4))],
           dtypes=ALL_FLOATS),
    OpCase("logcumsumexp", lambda m, a: a.logcumsumexp(0), [In((4, 2, 3))], "dim0"),
    OpCase("logcumsumexp", lambda m, a: a.logcumsumexp(-1), [custom(_spread)], "spread",
           dtypes=("float32", "float64")),
    OpCase("logcumsumexp", double(lambda m, x: x.logcumsumexp(1)), [In((3, 4))], "double"),
]
