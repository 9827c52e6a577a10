"""``torch.autograd.graph.saved_tensors_hooks``, ``save_on_cpu`` and
``disable_saved_tensors_hooks`` (dualgraph/autograd/graph.py): gradients through packed and
unpacked saved tensors against PyTorch's, the hooks called when torch calls them (pack at
record time, unpack at backward), nesting, and a graph break under ``dg.compile``."""
import numpy as np
import pytest
import torch

import dualgraph as dg


def _mlp_grads(lib, hooks):
    """Gradients of a small MLP's loss whose forward ran inside ``hooks()``."""
    rng = np.random.default_rng(3)
    x = lib.tensor(rng.normal(size=(5, 4)).astype(np.float32))
    w1 = lib.tensor(rng.normal(size=(4, 7)).astype(np.float32), requires_grad=True)
    w2 = lib.tensor(rng.normal(size=(7, 3)).astype(np.float32), requires_grad=True)
    with hooks():
        h = lib.tanh(x @ w1) * lib.sigmoid(x @ w1)
        loss = (lib.exp(h @ w2) * h.sum(1, keepdim=True)).mean()
    loss.backward()
    return w1.grad.numpy(), w2.grad.numpy()


class Stash:
    """Pack hooks that keep detached copies in a dict, as offloading code does."""

    def __init__(self, lib):
        self.lib, self.store, self.packed, self.unpacked = lib, {}, 0, 0

    def pack(self, t):
        self.packed += 1
        self.store[self.packed] = t.detach().clone()
        return self.packed

    def unpack(self, key):
        self.unpacked += 1
        return self.store.pop(key)

    def __call__(self):
        return self.lib.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def test_detached_copies_give_torchs_gradients_and_are_all_unpacked():
    """The VJPs read the unpacked copies (detached: requires_grad is restored for them, as
    torch's unpacking does; without that, mul's VJP saw inputs needing no gradient and
    gave none), and every packed tensor is unpacked by the backward."""
    theirs, ours = Stash(torch), Stash(dg)
    want, got = _mlp_grads(torch, theirs), _mlp_grads(dg, ours)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert ours.packed > 0 and ours.unpacked == ours.packed and not ours.store


def test_hooks_that_change_values_change_the_gradient():
    """What the VJP reads is the unpacked tensor, not the original: doubling every saved
    tensor of ``x * x`` doubles its gradient, as in torch."""
    for lib in (torch, dg):
        x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t):
            y = (x * x).sum()
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), 4 * np.array([1.0, -2.0, 3.0]))


def test_innermost_block_applies_and_save_on_cpu_is_the_identity():
    outer = Stash(dg)
    x = dg.tensor([0.5, 1.5], requires_grad=True)
    with outer():
        with dg.autograd.graph.save_on_cpu(pin_memory=True):
            y = x.sin()
        z = (y * y).sum()
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.sin([0.5, 1.5]) * np.cos([0.5, 1.5]),
                               rtol=1e-6)
    assert outer.packed == 2   # (mul's two inputs; sin's under save_on_cpu is not packed)
    assert outer.unpacked == 2


def test_ops_without_differentiable_outputs_inside_a_block():
    """An op recorded whose outputs get no gradient (a cast to int64, a comparison) is
    packed as any other (its node has no outputs pointing to it: it crashed before)."""
    x = dg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    with Stash(dg)():
        as_int, positive = x.long(), x > 0
        values, _ = x.topk(2)
        values.sum().backward()
    assert as_int.tolist() == [0, -1, 2] and positive.tolist() == [True, False, True]
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 1.0])


def test_disable_saved_tensors_hooks_refuses_a_block_with_its_message():
    with dg.autograd.graph.disable_saved_tensors_hooks("no offloading here"):
        with pytest.raises(RuntimeError, match="no offloading here"):
            with Stash(dg)():
                pass
    with Stash(dg)():   # (and allowed again after the block)
        pass


def test_create_graph_through_packed_tensors_is_a_clear_error():
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    with Stash(dg)():
        y = (x * x).sum()
    with pytest.raises(NotImplementedError, match="create_graph=True through mul"):
        dg.autograd.grad(y, x, create_graph=True)


def _step(lib, hooks):
    def step(x, w):
        with hooks():
            loss = (lib.tanh(x @ w) ** 2).sum()
        loss.backward()
        return loss.detach()
    return step


def test_under_compile_user_hooks_break_and_save_on_cpu_compiles():
    """User hooks run Python per saved tensor at every call: a graph break with eager's
    results and the hooks called at every call; save_on_cpu's are the identity: a graph."""
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.normal(size=(3, 4)).astype(np.float32))
    for hooks, breaks in ((None, 1), (dg.autograd.graph.save_on_cpu, 0)):
        stash = Stash(dg)
        w = dg.tensor(rng.normal(size=(4, 2)).astype(np.float32), requires_grad=True)
        step = dg.compile(_step(dg, hooks or stash))
        for _ in range(3):
            w.grad = None
            loss = step(x, w)
            t = np.tanh(x.numpy() @ w.detach().numpy())
            np.testing.assert_allclose(loss.item(), (t ** 2).sum(), rtol=1e-5)
            np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ (2 * t * (1 - t * t)),
                                       rtol=1e-5, atol=1e-6)
        report = step.explain()
        assert f"{breaks} graph break" in report, report
        if hooks is None:
            assert stash.packed >= 3 and stash.unpacked == stash.packed


def test_a_block_entered_outside_a_compiled_function_breaks_it():
    stash = Stash(dg)
    w = dg.tensor([[0.5], [-1.0]], requires_grad=True)
    f = dg.compile(lambda x: (dg.tanh(x @ w) * x.sum()).sum())
    x = dg.tensor([[1.0, 2.0]])
    with stash():
        y = f(x)
    y.backward()
    assert "1 graph break" in f.explain() and stash.packed > 0
    assert stash.unpacked == stash.packed
    t = np.tanh(-1.5)
    np.testing.assert_allclose(w.grad.numpy().ravel(), 3 * (1 - t * t) * np.array([1.0, 2.0]),
                               rtol=1e-5)
