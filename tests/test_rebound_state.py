"""Tensors a compiled step rebinds on the objects it reads (capture/held.py, compile.py's
``_stores``), and tensors held outside modules rebound outside the step: compiled against
eager on values, no retrace per call, and the guards that must fire."""
from __future__ import annotations

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn.functional as F


class Linear:
    def __init__(self, rng, fan_in, fan_out):
        self.weight = dg.tensor(rng.normal(0, fan_in ** -0.5, (fan_in, fan_out)).astype(
            np.float32), requires_grad=True)

    def __call__(self, x):
        self.out = x @ self.weight     # kept for inspection, with history
        return self.out


class BatchNorm1d:
    """makemore's hand-written BatchNorm: new running statistics rebound at every call."""

    def __init__(self, dim, momentum=0.1):
        self.momentum = momentum
        self.gamma = dg.ones(dim, requires_grad=True)
        self.beta = dg.zeros(dim, requires_grad=True)
        self.running_mean = dg.zeros(dim)
        self.running_var = dg.ones(dim)

    def __call__(self, x):
        mean, var = x.mean(0, keepdim=True), x.var(0, keepdim=True)
        self.out = self.gamma * (x - mean) / dg.sqrt(var + 1e-5) + self.beta
        with dg.no_grad():
            self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
            self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var
        return self.out


class Net:
    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.layers = [Linear(rng, 5, 8), BatchNorm1d(8), Linear(rng, 8, 3)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def parameters(self):
        return [self.layers[0].weight, self.layers[1].gamma, self.layers[1].beta,
                self.layers[2].weight]


def make_step(net):
    params = net.parameters()

    def step(x, y, lr):
        loss = F.cross_entropy(net(x), y)
        for p in params:
            p.grad = None
        loss.backward()
        for p in params:
            p.data += -lr * p.grad
        return loss
    return step


def state(net):
    bn = net.layers[1]
    return ([p.detach().numpy().copy() for p in net.parameters()]
            + [bn.running_mean.numpy().copy(), bn.running_var.numpy().copy()]
            + [layer.out.detach().numpy().copy() for layer in net.layers])


def batches(n, seed=1):
    rng = np.random.default_rng(seed)
    return [(dg.tensor(rng.normal(size=(6, 5)).astype(np.float32)),
             dg.tensor(rng.integers(0, 3, 6))) for _ in range(n)]


def close(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_rebound_running_stats_and_kept_outputs_match_eager_without_retracing():
    eager_net, net = Net(), Net()
    eager_step, step = make_step(eager_net), dg.compile(make_step(net))
    data = batches(10)
    for i, (x, y) in enumerate(data):
        lr = 0.1
        want, got = eager_step(x, y, lr), step(x, y, lr)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        close(state(net), state(eager_net))
        if i == 4:
            records = len(step.records)
    assert len(step.records) == records      # no retrace once it stores at every run
    assert step._split is None               # and not its Python at every call
    text = step.explain()
    assert "stores a new tensor there after each run" in text
    assert "it reads the one before from the same place" in text
    assert "running_mean" in text and "without it" in text


def test_a_tensor_held_from_before_keeps_its_value():
    net = Net()
    step = dg.compile(make_step(net))
    data = batches(6)
    for x, y in data[:5]:
        step(x, y, 0.1)
    old = net.layers[1].running_mean
    kept = old.numpy().copy()
    step(*data[5], 0.1)
    assert net.layers[1].running_mean is not old
    np.testing.assert_array_equal(old.numpy(), kept)


def test_rebinding_outside_the_step_is_read():
    eager_net, net = Net(), Net()
    eager_step, step = make_step(eager_net), dg.compile(make_step(net))
    for k, (x, y) in enumerate(batches(9)):
        if k == 6:   # a reset between epochs, outside the step
            for n in (eager_net, net):
                n.layers[1].running_mean = dg.full((8,), 0.5)
        eager_step(x, y, 0.1)
        step(x, y, 0.1)
        close(state(net), state(eager_net))
    assert step._split is None


def test_an_argument_that_is_the_tensor_a_rebinding_step_writes_in_place_sees_the_write():
    """A step that writes its state ``S.acc`` in place and then rebinds it (a graph that
    reads the tensor stored before from ``S.acc``), passed that very tensor as ``c``: the
    write reaches ``c``, as eagerly, at the call it is passed and at the calls after."""
    def world():
        S = type("State", (), {})()
        S.acc = dg.zeros(4, dtype=dg.float64)

        def step(x, c):
            with dg.no_grad():
                S.acc.add_(x.mean())
            S.acc = S.acc * 0.9 + x.mean(0) * 0.1
            return x * c
        return S, step

    (eager_s, eager_step), (s, step) = world(), world()
    step = dg.compile(step)
    rng = np.random.default_rng(0)
    for k in range(7):
        x = rng.normal(size=(3, 4))
        own = rng.normal(size=4)
        cs = [dg.tensor(own) if k < 4 or k == 5 else S.acc for S in (eager_s, s)]
        want, got = eager_step(dg.tensor(x), cs[0]), step(dg.tensor(x), cs[1])
        for u, v in ((got, want), (cs[1], cs[0]), (s.acc, eager_s.acc)):
            np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12)


REBINDING_STEPS = {   # a step that writes its state in place, then rebinds it
    "attribute": "def make():\n    S = type('State', (), {})()\n"
                 "    S.acc = dg.zeros(4, dtype=dg.float64)\n\n    def step(x, c):\n"
                 "        with dg.no_grad():\n            S.acc.add_(x.mean())\n"
                 "        S.acc = S.acc * 0.9 + x.mean(0) * 0.1\n        return x * c\n"
                 "    return step, lambda: S.acc\n",
    "global": "G = dg.zeros(4, dtype=dg.float64)\n\ndef make():\n    def step(x, c):\n"
              "        global G\n        with dg.no_grad():\n            G[1:].mul_(0.5)\n"
              "        G = G * 0.9 + x.detach().mean(0) * 0.1\n        return (x * c).sum(0)\n"
              "    return step, lambda: G\n",
}


@pytest.mark.parametrize("where", list(REBINDING_STEPS))
@pytest.mark.parametrize("pattern", ["always", "in turns"])
def test_passing_the_tensor_the_step_rebinds_traces_once_per_pattern(where, pattern):
    """The step passed, as ``c``, the very tensor it rebinds (``f(x, S.acc)``, at every
    call or in turns with a tensor of its own): one graph per way the arguments share
    storage with that place (guarded by the place, not by the tensor there, which is new
    at every call), not a trace per call; values as eager's."""
    runs, traces = [], 0
    for compiled in (False, True):
        namespace = {"dg": dg, "__name__": "generated"}
        exec(REBINDING_STEPS[where], namespace)
        step, state = namespace["make"]()
        fn = dg.compile(step) if compiled else step
        rng, seen = np.random.default_rng(0), []
        for k in range(12):
            own = pattern == "in turns" and k % 2 == 0
            c = dg.tensor(rng.normal(size=4)) if own else state()
            seen.append((fn(dg.tensor(rng.normal(size=(3, 4))), c).numpy(),
                         c.numpy().copy(), state().numpy().copy()))
        runs.append(seen)
        if compiled:
            traces = sum(r.kind in ("capture", "retrace") for r in fn.records)
            assert fn._split is None and not fn.eager_only, fn.explain()
    for want, got in zip(*runs):
        for u, v in zip(got, want):
            np.testing.assert_allclose(u, v, rtol=1e-12)
    # (three to learn that it stores a new tensor at each call, one for the other pattern)
    assert traces <= (3 if pattern == "always" else 4), fn.explain()


def test_state_of_a_class_without_a_module_name():
    """A class made by ``type()`` in code run by ``exec`` without ``__name__`` has no
    ``__module__``: the scope walk crashed on it (AttributeError) instead of reading its
    object's state."""
    namespace = {"dg": dg}
    exec("S = type('State', (), {})()\nS.acc = dg.ones(3)\n"
         "def step(x):\n    S.acc = S.acc * 0.5 + x\n    return x * S.acc", namespace)
    assert not hasattr(type(namespace["S"]), "__module__")
    fn, want = dg.compile(namespace["step"]), []
    for k in range(4):
        want.append((dg.arange(3.0) + k) * (namespace["S"].acc * 0.5 + dg.arange(3.0) + k))
        np.testing.assert_allclose(fn(dg.arange(3.0) + k).numpy(), want[-1].numpy())


def test_rebinding_to_another_shape_traces_again():
    eager_net, net = Net(), Net()
    eager_step, step = make_step(eager_net), dg.compile(make_step(net))
    data = batches(8)
    for k, (x, y) in enumerate(data):
        if k == 6:
            for n in (eager_net, net):
                n.layers[1].running_mean = dg.zeros(8)   # (1, 8) after a step: broadcasts the same
        eager_step(x, y, 0.1)
        step(x, y, 0.1)
        close(state(net), state(eager_net))
    assert "running_mean now holds" in step.explain()


class Holder:
    pass


SCALE = dg.ones(3)


@pytest.mark.parametrize("where", ["attribute", "list", "global", "closure"])
def test_a_tensor_outside_modules_assigned_anew_is_seen(where):
    global SCALE
    holder, items = Holder(), [dg.ones(3)]
    holder.w = dg.ones(3)
    cell = dg.ones(3)

    def read():
        return {"attribute": lambda: holder.w, "list": lambda: items[0],
                "global": lambda: SCALE, "closure": lambda: cell}[where]()

    def fn(x):
        if where == "global":
            return x * SCALE
        if where == "closure":
            return x * cell
        return x * (holder.w if where == "attribute" else items[0])

    compiled = dg.compile(fn)
    x = dg.tensor([1.0, 2.0, 3.0])
    with dg.no_grad():
        compiled(x)
        compiled(x)
        new = dg.full((3,), 2.0)
        if where == "attribute":
            holder.w = new
        elif where == "list":
            items[0] = new
        elif where == "global":
            SCALE = new
        else:
            cell = new
        assert read() is new
        np.testing.assert_array_equal(compiled(x).numpy(), [2.0, 4.0, 6.0])
        np.testing.assert_array_equal(compiled(x).numpy(), [2.0, 4.0, 6.0])
    SCALE = dg.ones(3)
    report = compiled.explain()   # (a global or closure variable: the scope's own guard)
    assert ("assigned anew outside the function" in report
            or "is another object now" in report), report


def test_a_kept_tensor_with_history_and_no_backward_inside_is_not_made_a_value():
    """Without a backward inside the step, a kept tensor with history is not stored as a
    value (a backward through it outside would miss the weights): its Python runs at every
    call, keeping eager's values."""
    lin = dg.nn.Linear(3, 2)

    class Probe:
        pass
    probe = Probe()

    def f(x):
        probe.out = lin(x) * 2
        return probe.out.detach()

    fn = dg.compile(f)
    for k in range(5):
        x = dg.full((4, 3), float(k))
        fn(x)
        np.testing.assert_allclose(probe.out.detach().numpy(), (lin(x) * 2).detach().numpy(),
                                   rtol=1e-6)
    assert "stores a new tensor there" not in fn.explain()
