"""``Module.register_full_backward_hook`` and ``register_full_backward_pre_hook``
(nn/backward_hooks.py) against torch's: the same scenario written once for both frameworks
(``T`` is torch or dualgraph), run on the same weights, gives the same hook calls (which,
in which order, ``grad_input``/``grad_output`` entries and their values), the same
gradients after a hook's replacement, and the same errors; under ``dg.compile`` a hooked
module is a graph break at the user's line whose results are eager's."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dualgraph as dg

torch = pytest.importorskip("torch")

W = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
B = np.random.default_rng(1).normal(size=4).astype(np.float32)
X = np.random.default_rng(2).normal(size=(2, 3)).astype(np.float32)


def arr(t):
    """A copy (a hook's gradient may become a ``.grad`` that a later backward adds into)."""
    return None if t is None else np.array(t.detach().numpy(), copy=True)


def entries(grads):
    """A hook's tuple as arrays (None kept), so both frameworks' compare."""
    return [arr(g) for g in grads]


def linear(T):
    lin = T.nn.Linear(3, 4)
    with T.no_grad():
        lin.weight.copy_(T.tensor(W))
        lin.bias.copy_(T.tensor(B))
    return lin


class Scenarios:
    """Each method takes ``T`` (torch or dualgraph) and returns what is compared."""

    @staticmethod
    def several_inputs_and_outputs(T):
        class Two(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = linear(T)

            def forward(self, x, mask, index, scale):
                h = self.lin(x) * mask
                return h * scale, h[index].sum(0), 7   # (the third: no tensor)

        m, log = Two(), []
        m.register_full_backward_hook(
            lambda mod, gi, go: log.append((entries(gi), entries(go))))
        x = T.tensor(X, requires_grad=True)
        out, pooled, seven = m(x, T.ones(2, 4), T.tensor([1, 0]), 3.0)
        out.sum().backward()   # (pooled gets no gradient: None in grad_output)
        return {"log": log, "x": arr(x.grad), "w": arr(m.lin.weight.grad), "seven": seven}

    @staticmethod
    def unused_input_gets_zeros(T):
        class Pick(T.nn.Module):
            def forward(self, a, b):
                return b * 3

        m, log = Pick(), []
        m.register_full_backward_hook(lambda mod, gi, go: log.append(entries(gi)))
        a, b = T.ones(2, requires_grad=True), T.ones(2, requires_grad=True)
        m(a, b).sum().backward()
        return {"log": log, "a": arr(a.grad), "b": arr(b.grad)}

    @staticmethod
    def replaced_grad_input(T):
        lin = linear(T)
        lin.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 10,))
        x = T.tensor(X, requires_grad=True)
        (lin(x).pow(2).sum() + x.sum()).backward()   # (x's own path is not the hook's)
        return {"x": arr(x.grad), "w": arr(lin.weight.grad)}

    @staticmethod
    def replaced_grad_output(T):
        lin, log = linear(T), []
        lin.register_full_backward_pre_hook(lambda mod, go: (go[0] * -2,))
        lin.register_full_backward_hook(lambda mod, gi, go: log.append(entries(go)))
        x = T.tensor(X, requires_grad=True)
        lin(x).tanh().sum().backward()
        return {"x": arr(x.grad), "w": arr(lin.weight.grad), "b": arr(lin.bias.grad),
                "seen": log}

    @staticmethod
    def no_input_requires_grad(T):
        lin, log = linear(T), []
        lin.register_full_backward_hook(lambda mod, gi, go: log.append((gi, entries(go))))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lin(T.tensor(X)).sum().backward()
        lin.register_full_backward_hook(lambda mod, gi, go: (T.ones(2, 3),))
        with pytest.raises(RuntimeError, match="no input requires gradient"):
            lin(T.tensor(X)).sum().backward()
        return {"log": log, "w": arr(lin.weight.grad),
                "warned": ["no inputs require gradients" in str(w.message) for w in caught]}

    @staticmethod
    def order_nested_removed_and_prepended(T):
        order = []

        def note(name):
            return lambda *args: order.append(name)

        seq = T.nn.Sequential(linear(T), T.nn.Tanh())
        seq.register_full_backward_pre_hook(note("pre seq"))
        seq.register_full_backward_hook(note("seq"))
        seq[0].register_full_backward_hook(note("lin"))
        seq[1].register_full_backward_pre_hook(note("pre tanh"))
        seq[1].register_full_backward_hook(note("tanh"))
        seq[1].register_full_backward_hook(note("tanh first"), prepend=True)
        gone = seq[0].register_full_backward_hook(note("removed"))
        gone.remove()
        seq(T.tensor(X, requires_grad=True)).sum().backward()
        return {"order": order}

    @staticmethod
    def called_twice_and_backward_twice(T):
        lin, log = T.nn.Linear(4, 4), []
        with T.no_grad():
            lin.weight.copy_(T.tensor(np.eye(4, dtype=np.float32) * 0.5))
            lin.bias.zero_()
        lin.register_full_backward_hook(
            lambda mod, gi, go: log.append((arr(go[0]), arr(gi[0]))))
        x = T.ones(1, 4, requires_grad=True)
        y = lin(lin(x))
        (y.sum() * 2).backward(retain_graph=True)
        y.sum().backward()
        g, = T.autograd.grad(lin(x).sum(), x)
        return {"log": log, "x": arr(x.grad), "g": arr(g)}

    @staticmethod
    def in_place_on_an_intermediate_is_allowed(T):
        class Act(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = linear(T)

            def forward(self, x):
                h = self.lin(x)
                h.relu_()
                return h

        m, log = Act(), []
        m.register_full_backward_hook(lambda mod, gi, go: log.append(entries(gi)))
        x = T.tensor(X, requires_grad=True)
        m(x).sum().backward()
        return {"log": log, "x": arr(x.grad)}

    @staticmethod
    def errors(T):
        seq = T.nn.Sequential(linear(T), T.nn.ReLU(inplace=True))
        seq[1].register_full_backward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="modified inplace|modified in place"):
            seq(T.tensor(X))
        lin = linear(T)
        lin.register_full_backward_hook(lambda *a: None)
        out = lin(T.tensor(X, requires_grad=True))
        with pytest.raises(RuntimeError, match="modified inplace|modified in place"):
            out.mul_(2)
        wrong = linear(T)
        wrong.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
        with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but "
                                               "expected 1"):
            wrong(T.tensor(X, requires_grad=True)).sum().backward()
        wrong_pre = linear(T)
        wrong_pre.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
        with pytest.raises(RuntimeError, match="invalid number of grad_output"):
            wrong_pre(T.tensor(X, requires_grad=True)).sum().backward()
        return {}

    @staticmethod
    def list_output_and_no_grad(T):
        class Pair(T.nn.Module):
            def forward(self, x):
                return [x * 2, x * 3]

        m, log = Pair(), []
        m.register_full_backward_hook(lambda *a: log.append("called"))
        x = T.ones(2, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m(x)[0].sum().backward()
        with T.no_grad():
            y = m(x)[0]
        return {"log": log, "x": arr(x.grad), "no_grad": y.requires_grad,
                "warned": any("module output should be a Tensor" in str(w.message)
                              for w in caught)}


SCENARIOS = [name for name in vars(Scenarios) if not name.startswith("_")]


def same(got, want, path="result"):
    if isinstance(want, dict):
        assert set(got) == set(want), path
        for k in want:
            same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{path}[{i}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype.kind == want.dtype.kind, path
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=path)
    else:
        assert got == want, path


@pytest.mark.parametrize("name", SCENARIOS)
def test_backward_hooks_match_torch(name):
    scenario = getattr(Scenarios, name)
    same(scenario(dg), scenario(torch))


class Materialize(dg.autograd.Function):
    """Two outputs; backward sees None (not zeros) for the one that got no gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, ga, gb):
        Materialize.seen = (ga is None, gb is None)
        return ga * 2


def test_a_function_that_does_not_materialize_gets_none_for_an_unused_output():
    """(The engine filled zeros for a multi-output op's missing gradients before the
    function's backward could see None; torch gives None.)"""
    x = dg.ones(2, requires_grad=True)
    a, _ = Materialize.apply(x)
    a.sum().backward()
    assert Materialize.seen == (False, True) and x.grad.tolist() == [2.0, 2.0]


def test_an_input_returned_as_it_is_by_a_function_is_not_modified_in_place():
    class Same(dg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 10

    y = Same.apply(dg.ones(2, requires_grad=True) * 1)
    with pytest.raises(RuntimeError, match="Same is a view of its input"):
        y.relu_()
    with dg.no_grad():
        y.mul_(2)   # (no history to override)
    assert y.tolist() == [2.0, 2.0]


def _training(compile_what):
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(3, 4), dg.nn.Tanh(), dg.nn.Linear(4, 2))
    seen = []

    def hook(mod, gi, go):
        seen.append(float(go[0].abs().sum()))
        return (gi[0] * 0.5,)

    model[2].register_full_backward_hook(hook)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    net = dg.compile(model) if compile_what == "model" else model

    def step(x):
        opt.zero_grad()
        loss = net(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    if compile_what == "step":
        step = dg.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses = [float(step(dg.ones(2, 3) * i)) for i in range(4)]
    return losses, seen, {"model": net, "step": step}.get(compile_what)


@pytest.mark.parametrize("compile_what", ["model", "step"])
def test_a_hooked_module_under_compile_is_a_graph_break_with_eagers_results(compile_what):
    want = _training("eager")[:2]
    losses, seen, compiled = _training(compile_what)
    assert (losses, seen) == want and len(seen) == 4
    report = compiled.explain()
    assert "1 graph break" in report and "backward hooks" in report
    assert "test_module_backward_hooks.py" in report


def test_a_hook_registered_after_compiling_is_called():
    lin, seen = dg.nn.Linear(3, 2), []
    compiled = dg.compile(lin)
    x = dg.ones(1, 3, requires_grad=True)
    compiled(x).sum().backward()
    handle = lin.register_full_backward_hook(lambda m, gi, go: seen.append(gi[0].shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(x).sum().backward()
    handle.remove()
    assert seen == [(1, 3)]


class Marked(dg.autograd.Function):
    """Returns its input as it is, marked non-differentiable, and a product."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_non_differentiable(x)
        return x, x * 2

    @staticmethod
    def backward(ctx, gx, gy):
        return gy * 2


def test_an_input_returned_as_it_is_and_marked_non_differentiable_gets_no_gradient():
    """(The new tensor standing for the returned input was not the one marked, so it was
    differentiable: module hooks gave a gradient to an input that needs none.)"""
    x = dg.ones(2, requires_grad=True)
    same_x, y = Marked.apply(x)
    assert not same_x.requires_grad and y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_hooked_module_compiled_under_no_grad_stays_one_graph():
    """Without grad mode no hook can run, so a compiled evaluation is no graph break."""
    lin, seen = dg.nn.Linear(3, 2), []
    lin.register_full_backward_hook(lambda m, gi, go: seen.append(1))
    compiled = dg.compile(lin)
    x = dg.ones(4, 3)
    with dg.no_grad():
        got = [compiled(x * i).numpy() for i in range(3)]
        want = [lin(x * i).numpy() for i in range(3)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert "0 graph break" in compiled.explain() and not seen
