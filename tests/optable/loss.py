"""Rows for the one-op losses and their backward ops: the fused softmax cross-entropy
(``F.cross_entropy`` on (N, C) logits and class-index targets without weights or
smoothing) and its backward, the negative log-likelihood (``F.nll_loss`` on (N, C)
log-probabilities without class weights), and the smooth L1 / Huber loss (beta 0, small,
1 and large; each reduction)."""
from dualgraph.dispatch import apply
from dualgraph.ops.loss import CROSS_ENTROPY_WITH_GRAD

from . import In, OpCase

ALL_FLOATS = ("float32", "float64", "float16", "bfloat16")


def targets(n, classes, ignored=(), ignore_index=-100, dtype="int64"):
    """Class indices for ``n`` rows, ``ignore_index`` at the rows ``ignored``."""
    def make(rng, float_dtype):
        t = rng.integers(0, classes, n)
        t[list(ignored)] = ignore_index
        return t.astype(dtype)
    return In((n,), "custom", fn=make)


def ce(reduction="mean", **kw):
    return lambda m, x, t: m.nn.functional.cross_entropy(x, t, reduction=reduction, **kw)


def first_grad(reduction, **kw):
    """d sum(cross_entropy(x, t) * v) / dx, differentiable in x and v: the backward op's
    row, whose gradient check tests the second derivative."""
    def fn(m, x, v, t):
        with m.enable_grad():
            if not x.requires_grad:
                x.requires_grad_()
            loss = m.nn.functional.cross_entropy(x, t, reduction=reduction, **kw)
            return m.autograd.grad((loss * v).sum(), x, create_graph=True)[0]
    return fn


def with_grad(reduction, ignore_index=-100):
    """``cross_entropy_with_grad`` against torch's loss and the gradient autograd gives it
    for the seed ``g``."""
    def fn(m, x, t, g):
        if m.__name__ != "torch":
            return apply(CROSS_ENTROPY_WITH_GRAD, x, t, g, ignore_index=ignore_index,
                         reduction=reduction)
        x = x.detach().requires_grad_()
        loss = m.nn.functional.cross_entropy(x, t, reduction=reduction,
                                             ignore_index=ignore_index)
        return loss, m.autograd.grad(loss, x, g)[0]
    return fn


CASES = [
    OpCase("cross_entropy", ce(), [In((6, 5)), In((6,), "int", 0, 5)], dtypes=ALL_FLOATS,
           atol=1e-4),
    OpCase("cross_entropy", ce("sum"), [In((4, 7)), targets(4, 7, ignored=[1])], "sum-ignored"),
    OpCase("cross_entropy", ce("none"), [In((5, 3)), targets(5, 3, ignored=[0, 3])],
           "none-ignored", dtypes=("float32", "float64")),
    OpCase("cross_entropy", ce(ignore_index=2), [In((6, 4)), In((6,), "int", 0, 4)],
           "ignore-class"),
    OpCase("cross_entropy", ce(), [In((3, 4)), In((3,), "int", 0, 4, dtype="uint8")], "uint8"),
    OpCase("cross_entropy", ce(), [In((3, 4)), targets(3, 4, ignored=[0, 1, 2])],
           "all-ignored", grad=False),
    OpCase("cross_entropy_backward", first_grad("mean"),
           [In((5, 4)), In(()), targets(5, 4, ignored=[2])], "mean",
           dtypes=("float32", "float64")),
    OpCase("cross_entropy_backward", first_grad("sum"), [In((3, 6)), In(()), targets(3, 6)],
           "sum"),
    OpCase("cross_entropy_backward", first_grad("none"),
           [In((4, 3)), In((4,)), targets(4, 3, ignored=[1])], "none"),
    OpCase("cross_entropy_with_grad", with_grad("mean"),
           [In((6, 5)), targets(6, 5, ignored=[2]), In(())], "mean",
           dtypes=("float32", "float64"), grad=False),
    OpCase("cross_entropy_with_grad", with_grad("sum", ignore_index=3),
           [In((4, 7)), In((4,), "int", 0, 7), In(())], "sum-ignore-class", grad=False),
    OpCase("cross_entropy_with_grad", with_grad("none"),
           [In((5, 3)), targets(5, 3, ignored=[0, 3]), In((5,))], "none", grad=False),
]


def smooth_l1(reduction="mean", beta=1.0):
    return lambda m, x, y: m.nn.functional.smooth_l1_loss(x, y, reduction=reduction, beta=beta)


def huber(reduction="mean", delta=1.0):
    return lambda m, x, y: m.nn.functional.huber_loss(x, y, reduction=reduction, delta=delta)


def smooth_l1_grad(reduction, beta):
    """d sum(smooth_l1_loss(x, y) * v) / dx, differentiable in x, y and v (the backward
    op's row: its gradient check tests the second derivative)."""
    def fn(m, x, y, v):
        with m.enable_grad():
            if not x.requires_grad:
                x.requires_grad_()
            loss = m.nn.functional.smooth_l1_loss(x, y, reduction=reduction, beta=beta)
            return m.autograd.grad((loss * v).sum(), x, create_graph=True)[0]
    return fn


CASES += [
    OpCase("smooth_l1_loss", smooth_l1(), [In((5, 3)), In((5, 3))], "mean",
           dtypes=("float32", "float64", "float16"), atol=1e-3),
    OpCase("smooth_l1_loss", smooth_l1("sum", 0.3), [In((7,)), In((7,))], "sum-beta0.3"),
    OpCase("smooth_l1_loss", smooth_l1("none", 2.5), [In((2, 3, 4)), In((2, 3, 4))],
           "none-beta2.5"),
    OpCase("smooth_l1_loss", smooth_l1("mean", 0.0), [In((6,)), In((6,))], "beta0"),
    OpCase("smooth_l1_loss", smooth_l1("none"), [In((1,)), In((1,))], "one-element"),
    OpCase("smooth_l1_loss", huber("mean", 0.5),
           [In((4, 5)), In((4, 5))], "huber-mean"),
    OpCase("smooth_l1_loss", huber("none", 1.5), [In((3, 2)), In((3, 2))], "huber-none"),
    OpCase("smooth_l1_backward", smooth_l1_grad("mean", 1.0),
           [In((4, 3)), In((4, 3)), In(())], "mean"),
    OpCase("smooth_l1_backward", smooth_l1_grad("none", 0.5),
           [In((5,)), In((5,)), In((5,))], "none"),
    OpCase("smooth_l1_backward", smooth_l1_grad("sum", 2.0),
           [In((2, 3)), In((2, 3)), In(())], "sum-beta2"),
]


def nll(reduction="mean", **kw):
    return lambda m, x, t: m.nn.functional.nll_loss(x, t, reduction=reduction, **kw)


def nll_grad(reduction, **kw):
    """d sum(nll_loss(log_softmax(x), t) * v) / dx, differentiable in x and v (through
    the nll backward op)."""
    def fn(m, x, v, t):
        with m.enable_grad():
            if not x.requires_grad:
                x.requires_grad_()
            logp = m.nn.functional.log_softmax(x, 1)
            loss = m.nn.functional.nll_loss(logp, t, reduction=reduction, **kw)
            return m.autograd.grad((loss * v).sum(), x, create_graph=True)[0]
    return fn


CASES += [
    OpCase("nll_loss", nll(), [In((6, 5)), In((6,), "int", 0, 5)], "mean",
           dtypes=("float32", "float64", "float16")),
    OpCase("nll_loss", nll("sum"), [In((4, 7)), targets(4, 7, ignored=[1])], "sum-ignored"),
    OpCase("nll_loss", nll("none"), [In((5, 3)), targets(5, 3, ignored=[0, 3])],
           "none-ignored"),
    OpCase("nll_loss", nll(ignore_index=2), [In((6, 4)), In((6,), "int", 0, 4)],
           "ignore-class"),
    OpCase("nll_backward", nll_grad("mean"), [In((5, 4)), In(()), targets(5, 4, ignored=[2])],
           "mean"),
    OpCase("nll_backward", nll_grad("none"), [In((4, 3)), In((4,)), targets(4, 3)], "none"),
]


def ctc(reduction="mean", blank=0, concatenated=False, tensors=True, **kw):
    """``F.ctc_loss`` of the log-softmax of x (T, N, C) at targets t (padded (N, S), or the
    first target length of each row concatenated), with the lengths as tensors or tuples."""
    def fn(m, x, t, input_lengths, target_lengths):
        lengths = tuple(target_lengths)
        if tensors:
            input_lengths, lengths = m.tensor(input_lengths), m.tensor(lengths)
        if concatenated:
            t = m.cat([t[i, :n] for i, n in enumerate(target_lengths)])
        return m.nn.functional.ctc_loss(m.log_softmax(x, 2), t, input_lengths, lengths,
                                        blank=blank, reduction=reduction, **kw)
    return fn


def labels(n, length, classes, blank=0, repeat=True):
    """Padded label rows (n, length) in [0, classes) without ``blank``; row 0 repeats its
    first label (CTC then needs a blank between the two)."""
    def make(rng, float_dtype):
        t = rng.integers(0, classes - 1, (n, length))
        t[t >= blank] += 1
        if repeat:
            t[0, 1] = t[0, 0]
        return t
    return In((n, length), "custom", fn=make)


def ctc_grad(**kw):
    """The gradient of the summed CTC losses with respect to the logits (through the
    log-softmax: torch's own backward adds ``exp(log_probs)``, which it cancels)."""
    loss = ctc("sum", **kw)

    def fn(m, x, t, input_lengths, target_lengths):
        with m.enable_grad():
            x = x.detach().requires_grad_()
            return m.autograd.grad(loss(m, x, t, input_lengths, target_lengths), x)[0]
    return fn


CASES += [
    OpCase("ctc_loss", ctc(), [In((9, 3, 5)), labels(3, 4, 5), (9, 7, 5), [4, 2, 3]], "mean",
           dtypes=("float32", "float64")),
    OpCase("ctc_loss", ctc("none", blank=2), [In((8, 2, 4)), labels(2, 3, 4, blank=2), (8, 6),
                                              [3, 0]], "none-blank2-empty"),
    OpCase("ctc_loss", ctc("sum", concatenated=True, tensors=False),
           [In((7, 3, 6)), labels(3, 4, 6), (7, 7, 4), [4, 1, 2]], "concatenated"),
    OpCase("ctc_loss", ctc("none", zero_infinity=True, tensors=False),
           [In((3, 2, 4)), labels(2, 3, 4), (3, 3), [3, 1]], "zero-infinity"),
    OpCase("ctc_loss", ctc_grad(), [In((9, 3, 5)), labels(3, 4, 5), (9, 7, 5), [4, 2, 3]],
           "gradient", grad=False),
    OpCase("ctc_loss", ctc_grad(zero_infinity=True, blank=1),
           [In((4, 2, 3)), labels(2, 3, 3, blank=1), (4, 3), [3, 1]], "gradient-zero-infinity",
           grad=False),
]
