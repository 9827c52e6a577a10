"""Helpers for checking a dualgraph module against its torch twin with identical weights:
outputs, and gradients of the inputs and of every parameter (by name)."""
import numpy as np
import torch

import dualgraph as dg

TOL = dict(rtol=1e-9, atol=1e-11)


def load_from_torch(ours, ref):
    """Copy ``ref``'s state into ``ours`` by state_dict name (the key lists must be equal)."""
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict({k: dg.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    return ours


def leaves(arrays):
    """The same arrays as torch and dualgraph tensors; float ones require grad."""
    def pair(a):
        grad = np.asarray(a).dtype.kind == "f"
        return torch.tensor(a, requires_grad=grad), dg.tensor(a, requires_grad=grad)
    pairs = [pair(a) for a in arrays]
    return [t for t, _ in pairs], [d for _, d in pairs]


def flat(result):
    """The tensors of a call's result (tuples of tuples of tensors; Nones dropped)."""
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in flat(item)]
    return [] if result is None else [result]


def check(ref, ours, arrays, call, tol=TOL, seed=0):
    """Run ``call(ref, *inputs)`` and ``call(ours, *inputs)`` (modules, or namespaces such as
    torch.nn.functional and its twin), compare every output, then backpropagate the same
    random cotangents and compare the inputs' gradients and, for modules, every
    parameter's."""
    t_in, d_in = leaves(arrays)
    t_out, d_out = flat(call(ref, *t_in)), flat(call(ours, *d_in))
    assert len(t_out) == len(d_out)
    rng = np.random.default_rng(seed)
    t_loss, d_loss = 0, 0
    for t, d in zip(t_out, d_out):
        assert tuple(d.shape) == tuple(t.shape)
        np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), **tol)
        w = rng.standard_normal(tuple(t.shape))
        t_loss = t_loss + (t * torch.tensor(w)).sum()
        d_loss = d_loss + (d * dg.tensor(w)).sum()
    t_loss.backward()
    d_loss.backward()
    for t, d in zip(t_in, d_in):
        if t.grad is None:   # e.g. a mask torch ignored: ours must not depend on it either
            assert d.grad is None or not d.grad.numpy().any()
        elif t.requires_grad:
            np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), **tol)
    if isinstance(ref, torch.nn.Module):
        ours_params = dict(ours.named_parameters())
        for name, p in ref.named_parameters():
            np.testing.assert_allclose(ours_params[name].grad.numpy(), p.grad.numpy(), **tol,
                                       err_msg=name)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def assert_steps_match(want, eager, compiled, tol):
    """A training step's ``(loss, {name: gradient})`` eager and compiled against torch's
    ``want`` within ``tol``, and compiled against eager closely (the same kernels run)."""
    for got in (eager, compiled):
        np.testing.assert_allclose(got[0], want[0], **tol)
        assert sorted(got[1]) == sorted(want[1])
        for k in want[1]:
            np.testing.assert_allclose(got[1][k], want[1][k], err_msg=k, **tol)
    for k in eager[1]:
        np.testing.assert_allclose(compiled[1][k], eager[1][k], err_msg=k, rtol=1e-5,
                                   atol=1e-6)

