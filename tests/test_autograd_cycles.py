"""Eager autograd frees by reference counting alone: a node holds no output with its
history (node -> output -> node would be a cycle per op), a leaf holds its AccumulateGrad
weakly and a scheduler's step wrapper holds no bound method. What was dropped is freed with
the garbage collector off; gradients (also of gradients, through the stand-ins a node
keeps of its outputs) stay torch's, and in-place changes of a saved output stay errors."""
from __future__ import annotations

import copy
import gc
import pickle
import weakref

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 5)).astype(np.float32)


@pytest.fixture
def collector_off():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# ops of every kind of what a node keeps: none (mul), its output read by the VJP (tanh,
# exp, the reductions), several outputs (max over a dim, batch-norm's statistics)
FORWARDS = {
    "mul": lambda x: x * 0.5 + 1.0,
    "tanh": lambda x: x.tanh(),
    "exp_sum": lambda x: x.exp().sum(1),
    "amax": lambda x: x.amax(1),
    "logsumexp": lambda x: x.logsumexp(1),
    "norm": lambda x: x.norm(dim=1),
    "cumprod": lambda x: x.cumprod(1),
    "pow_tensor": lambda x: x.abs() ** (x * 0.5),
    "max_dim": lambda x: x.max(dim=1)[0],
    "batch_norm": lambda x: dg.nn.functional.batch_norm(
        x, None, None, training=True),
}


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_a_dropped_graph_is_freed_without_the_collector(name, collector_off):
    x = dg.tensor(X, requires_grad=True)
    y = FORWARDS[name](x)
    node, out = weakref.ref(y.grad_fn), weakref.ref(y)
    del y
    assert out() is None and node() is None, f"{name}: a reference cycle keeps the graph"


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_gradients_and_gradients_of_gradients_match_torch(name):
    fn = FORWARDS[name]
    tfn = {"batch_norm": lambda t: torch.nn.functional.batch_norm(t, None, None,
                                                                   training=True)}.get(name, fn)
    x, tx = dg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    (g,) = dg.autograd.grad((fn(x) ** 2).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((tfn(tx) ** 2).sum(), tx, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-4, atol=1e-5)
    (gg,) = dg.autograd.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["tanh", "amax", "logsumexp", "norm", "cumprod"])
def test_changing_a_saved_output_in_place_is_an_error_as_in_torch(name):
    fn = FORWARDS[name]
    for lib, make in ((torch, torch.tensor), (dg, dg.tensor)):
        y = fn(make(X, requires_grad=True))
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            y.sum().backward()


def test_changing_an_output_no_vjp_reads_stays_legal():
    x, tx = dg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    for t in (x, tx):
        y = (t * 3.0) ** 2   # (a number's exponent: the VJP reads the base only)
        y.relu_()
        y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_a_dropped_model_and_optimiser_are_freed_without_the_collector(collector_off):
    model = dg.nn.Sequential(dg.nn.Linear(5, 4), dg.nn.Tanh(), dg.nn.Linear(4, 1))
    opt = dg.optim.Adam(model.parameters(), lr=0.1)
    sched = dg.optim.lr_scheduler.StepLR(opt, step_size=2)
    for _ in range(2):
        opt.zero_grad()
        model(dg.tensor(X)).sum().backward()
        opt.step()
        sched.step()
    weight = weakref.ref(model[0].weight)
    state = weakref.ref(opt.state[model[0].weight]["exp_avg"])
    del model, opt, sched
    assert weight() is None and state() is None


def test_a_leafs_accumulator_is_one_per_graph_and_made_again_after():
    w = dg.tensor(X, requires_grad=True)
    a, b = w * 2.0, w * 3.0
    assert a.grad_fn.next_functions[0][0] is b.grad_fn.next_functions[0][0]
    (a + b).sum().backward()
    del a, b
    for _ in range(2):   # new graphs, new accumulators: the gradient still sums in .grad
        (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 5.0 + 2 * 2 * X, rtol=1e-6)


def test_a_copied_or_pickled_leaf_takes_its_own_gradients():
    w = dg.nn.Parameter(dg.ones(3))
    y = (w * 2).sum()   # (alive: w's accumulator is in use while copying)
    for copy_of in (copy.deepcopy, lambda t: pickle.loads(pickle.dumps(t))):
        c = copy_of(w)
        (c * 3).sum().backward()
        np.testing.assert_array_equal(c.grad.numpy(), [3, 3, 3])
        assert w.grad is None
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2, 2, 2])
