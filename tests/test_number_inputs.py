"""Python numbers that change between calls become graph inputs (capture/symbolic.py): a
hand-written optimiser's ``state["step"]``, a module's float attribute a schedule sets, a
global step counter. Compiled equals eager step by step, with at most two traces; a number
that decides control flow or a shape stays baked in and guarded (each change retraces)."""
import math
import warnings

import numpy as np
import pytest

import dualgraph as dg


class HandAdam:
    """A user-written Adam keeping ``state["step"]`` a Python int, updating ``p.data``."""

    def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8, sqrt=lambda x: x ** 0.5):
        self.param_groups = [{"params": list(params), "lr": lr, "betas": betas, "eps": eps}]
        self.state = {}
        self.sqrt = sqrt

    def zero_grad(self):
        for p in self.param_groups[0]["params"]:
            p.grad = None

    def step(self):
        group = self.param_groups[0]
        b1, b2 = group["betas"]
        with dg.no_grad():
            for p in group["params"]:
                st = self.state.setdefault(p, {})
                if not st:
                    st["step"] = 0
                    st["m"] = dg.zeros_like(p)
                    st["v"] = dg.zeros_like(p)
                st["step"] += 1
                st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                c1, c2 = 1 - b1 ** st["step"], 1 - b2 ** st["step"]
                denom = (st["v"].sqrt() / self.sqrt(c2)).add_(group["eps"])
                p.data.addcdiv_(st["m"], denom, value=-group["lr"] / c1)


def _batches(n, shape=(8, 4)):
    rng = np.random.default_rng(0)
    return [dg.tensor(rng.standard_normal(shape).astype(np.float32)) for _ in range(n)]


def _adam_run(compiled, sqrt=lambda x: x ** 0.5, steps=25):
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.Tanh(), dg.nn.Linear(8, 1))
    opt = HandAdam(model.parameters(), sqrt=sqrt)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = dg.compile(step) if compiled else step
    losses = [float(fn(x)) for x in _batches(steps)]
    assert [st["step"] for st in opt.state.values()] == [steps] * 4
    assert all(type(st["step"]) is int for st in opt.state.values())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], fn


def test_hand_written_adam_int_step_is_a_graph_input():
    eager_losses, eager_params, _ = _adam_run(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (no retrace limit, no graph break)
        losses, params, fn = _adam_run(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-6, atol=1e-7)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # the first call makes the moments (runs once), the second traces the step as an input
    assert len(fn.records) == 2 and len(fn.cache) == 1
    report = fn.explain()
    assert "opt.state[0]['step']" in report and "a graph input from now on" in report
    assert "fed to the graph as an input at every call" in report
    assert fn._fast is not None   # (the fast path feeds it too)


def test_math_sqrt_of_the_bias_correction_is_traced():
    """``math.sqrt(c2)``, as hand-written Adams write it, takes the traced number."""
    sqrt = lambda c2: math.sqrt(c2)   # noqa: E731  (math.sqrt read at the call)
    eager_losses, eager_params, _ = _adam_run(False, sqrt=sqrt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses, params, fn = _adam_run(True, sqrt=sqrt)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-6, atol=1e-7)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert len(fn.records) == 2 and math.sqrt(4.0) == 2.0


def test_another_math_function_keeps_the_step_baked_and_correct():
    """``math.exp`` needs the value: the step stays guarded (retraces, then eager)."""
    decay = lambda c2: c2 ** 0.5 * math.exp(-c2)   # noqa: E731
    eager_losses, eager_params, _ = _adam_run(False, sqrt=decay, steps=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (the retrace limit)
        losses, params, fn = _adam_run(True, sqrt=decay, steps=12)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-6, atol=1e-7)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    report = fn.explain()
    assert "not made graph inputs" in report and "float(), or a math function" in report
    assert "test_number_inputs.py" in report   # (the user's line)


class Scaled(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = dg.nn.Linear(3, 2)
        self.scale = 1.0

    def forward(self, x):
        return self.lin(x) * self.scale + self.scale ** 2


def test_module_float_attribute_changed_every_call():
    m = Scaled()
    c = dg.compile(m)
    x = dg.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(20):
            m.scale = 1.0 + 0.37 * i
            np.testing.assert_array_equal(c(x).detach().numpy(), m(x).detach().numpy())
    assert len(c.records) == 2
    assert "self.scale changed from 1.0 to 1.37" in c.explain()
    assert "graph input" in c.explain()
    assert type(m.scale) is float


def test_module_attribute_with_gradients_and_the_fast_path():
    m = Scaled()
    c = dg.compile(m)
    x = dg.randn(4, 3)
    for i in range(6):
        m.scale = 0.5 * (i + 1)
        m.zero_grad()
        c(x).sum().backward()
        got = [p.grad.numpy().copy() for p in m.parameters()]
        m.zero_grad()
        m(x).sum().backward()
        for a, p in zip(got, m.parameters()):
            np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-6)
    assert len(c.records) == 2


STEP = 0


def plain_global_counter(model, x):
    global STEP
    STEP += 1
    return model(x) * (1.0 + 0.1 * STEP) - STEP / 3


def test_global_counter():
    global STEP
    model = dg.nn.Linear(4, 2)
    x = dg.randn(3, 4)
    STEP = 0
    eager = [plain_global_counter(model, x).detach().numpy() for _ in range(20)]
    STEP = 0
    c = dg.compile(plain_global_counter)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [c(model, x).detach().numpy() for _ in range(20)]
    assert STEP == 20 and type(STEP) is int
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(a, b)
    assert len(c.records) == 2


def test_counter_used_in_a_branch_retraces_correctly():
    state = {"step": 0}
    model = dg.nn.Linear(4, 2)

    def step(x):
        state["step"] += 1
        y = model(x)
        if state["step"] % 3 == 0:      # control flow: the step stays baked in
            y = y * 2
        return y + state["step"]

    x = dg.randn(3, 4)
    eager = []
    for _ in range(7):
        eager.append(step(x).detach().numpy())
    state["step"] = 0
    c = dg.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (the retrace limit)
        got = [c(x).detach().numpy() for _ in range(7)]
    assert state["step"] == 7
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    report = c.explain()
    assert "not made graph inputs" in report and "(a comparison) at" in report


def test_number_used_as_a_shape_retraces_correctly():
    cfg = {"n": 2}

    def f(x):
        return x[: cfg["n"]].sum() + dg.ones(cfg["n"]).sum()

    c = dg.compile(f)
    x = dg.arange(10.0)
    for n in (2, 3, 4, 5):
        cfg["n"] = n
        assert float(c(x)) == float(f(x))
    assert len(c.cache) == 4
    assert "not made graph inputs" in c.explain()


def test_a_returned_number_stays_baked():
    state = {"t": 0}

    def f(x):
        state["t"] += 1
        return x * state["t"], state["t"]

    c = dg.compile(f)
    for i in range(1, 5):
        y, t = c(dg.ones(2))
        assert type(t) is int and t == i and y.tolist() == [float(i)] * 2
    assert "returned" in c.explain()


def test_int_counter_with_an_integer_tensor_and_division():
    """Python's rules: int / int is a float, int // int floors; meeting a tensor the
    number takes the tensor's dtype as eager gives it."""
    state = {"i": 3}

    def f(x, k):
        state["i"] += 2
        i = state["i"]
        return x * i + i // 4 - i % 3, k + i, x / i, (i / 3) * x

    x, k = dg.randn(3), dg.tensor([1, 2, 3], dtype=dg.int32)
    state["i"] = 3
    eager = [f(x, k) for _ in range(5)]
    state["i"] = 3
    c = dg.compile(f)
    got = [c(x, k) for _ in range(5)]
    for a, b in zip(got, eager):
        for u, v in zip(a, b):
            assert u.dtype == v.dtype
            np.testing.assert_array_equal(u.numpy(), v.numpy())
    assert len(c.records) == 2


def test_bool_flags_stay_guarded():
    cfg = {"flag": True}
    c = dg.compile(lambda x: x * 2 if cfg["flag"] else x - 1)
    for flag in (True, False, True, False):
        cfg["flag"] = flag
        assert c(dg.ones(2)).tolist() == ([2.0, 2.0] if flag else [0.0, 0.0])
    assert len(c.cache) == 2


@pytest.mark.parametrize("value", [0.5, 2])
def test_closure_number(value):
    scale = value

    def f(x):
        nonlocal scale
        scale = scale + value
        return x * scale

    c = dg.compile(f)
    out = [c(dg.ones(2)).tolist() for _ in range(6)]
    assert out == [[value * (i + 2)] * 2 for i in range(6)]
    assert type(scale) is type(value) and len(c.records) == 2


def test_python_number_arguments_that_change_become_inputs():
    model = dg.nn.Linear(4, 2)

    def f(x, scale, k, flag=True):
        y = model(x) * scale + k / 3
        return y if flag else -y

    c = dg.compile(f)
    x = dg.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(12):
            np.testing.assert_array_equal(c(x, 0.5 + i, i, flag=i < 6).detach().numpy(),
                                          f(x, 0.5 + i, i, flag=i < 6).detach().numpy())
    assert len(c.cache) <= 3   # (the flag is a bool: one graph each)
    report = c.explain()
    assert "scale changed from 0.5 to 1.5" in report and "k changed from 0 to 1" in report
    assert "scale: a Python float, fed to the graph as an input" in report


def test_a_number_argument_used_as_a_size_stays_baked():
    def g(x, n):
        return x[:n].sum()

    c = dg.compile(g)
    for n in (1, 2, 3, 4):
        assert float(c(dg.arange(6.0), n)) == float(g(dg.arange(6.0), n))
    assert len(c.cache) == 4 and "n not made graph inputs" in c.explain()


def test_a_numpy_float64_argument_that_changes_becomes_a_graph_input():
    """DANN's gradient-reversal weight ``2. / (1. + np.exp(-10 * p)) - 1`` is a NumPy
    float64, new every step: traced as a float input after its first change (it retraced
    at every call), equal to eager; one the function hands to NumPy stays baked in."""
    w = dg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    x = dg.tensor([1.0, 2.0, 3.0])

    def step(x, alpha):
        return (x * w * alpha).sum()

    def numpy_use(x, alpha):
        return (x * float(np.exp(alpha))).sum()
    for fn, graphs in ((step, 2), (numpy_use, 5)):
        compiled = dg.compile(fn)
        for i in range(5):
            alpha = 2. / (1. + np.exp(-10 * i / 5)) - 1
            got, want = compiled(x, alpha), fn(x, alpha)
            assert got.item() == want.item()
        assert len(compiled.cache) <= graphs, compiled.explain()
