"""``nn.utils.weight_norm`` against torch's: the same parameters (``weight_g`` of size-1
dims, ``weight_v``) in the same state-dict order, the same outputs and gradients, for
linear and convolution layers and each ``dim``; ``remove_weight_norm``; and a compiled
training step equal to eager's, captured once (no new tensor stored at every call)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)


def _pair(make, dim, shape):
    """The same layer in both frameworks under weight_norm, from the same weights."""
    layers = []
    for lib in (dg, torch):
        layer = make(lib)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # (torch's deprecation)
            lib.nn.utils.weight_norm(layer, dim=dim)
        layers.append(layer)
    state = {k: RNG.normal(size=tuple(v.shape)).astype("f4")
             for k, v in layers[1].state_dict().items()}
    for layer, lib in zip(layers, (dg, torch)):
        layer.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    x = RNG.normal(size=shape).astype("f4")
    return layers, x


CASES = [(lambda lib: lib.nn.Linear(5, 4), 0, (3, 5)),
         (lambda lib: lib.nn.Linear(5, 4), None, (3, 5)),
         (lambda lib: lib.nn.Linear(5, 4), 1, (3, 5)),
         (lambda lib: lib.nn.Conv1d(3, 4, 3, dilation=2, padding=2), 0, (2, 3, 9)),
         (lambda lib: lib.nn.Conv2d(2, 3, 3), 0, (2, 2, 5, 5))]


@pytest.mark.parametrize("make,dim,shape", CASES)
def test_weight_norm_matches_torch(make, dim, shape):
    (d, t), x = _pair(make, dim, shape)
    assert list(d.state_dict()) == list(t.state_dict())
    assert [n for n, _ in d.named_parameters()] == [n for n, _ in t.named_parameters()]
    outs = []
    for layer, lib in ((d, dg), (t, torch)):
        y = layer(lib.tensor(x))
        (y * y).sum().backward()
        outs.append([y, layer.weight, layer.weight_g.grad, layer.weight_v.grad, layer.bias.grad])
    for g, w in zip(*outs):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_remove_weight_norm_keeps_the_weight():
    (d, t), x = _pair(lambda lib: lib.nn.Conv1d(3, 4, 2), 0, (2, 3, 6))
    d(dg.tensor(x)), t(torch.tensor(x))
    dg.nn.utils.remove_weight_norm(d)
    torch.nn.utils.remove_weight_norm(t)
    assert list(d.state_dict()) == list(t.state_dict()) and type(d) is dg.nn.Conv1d
    np.testing.assert_allclose(d.weight.detach().numpy(), t.weight.detach().numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="not found"):
        dg.nn.utils.remove_weight_norm(d)


def test_weight_norm_errors():
    layer = dg.nn.utils.weight_norm(dg.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="two weight_norm"):
        dg.nn.utils.weight_norm(layer)
    with pytest.raises(TypeError, match="not a parameter"):
        dg.nn.utils.weight_norm(dg.nn.Linear(2, 2), name="scale")


def test_compiled_step_with_weight_norm_matches_eager():
    losses = []
    for compiled in (False, True):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.utils.weight_norm(dg.nn.Conv1d(2, 4, 3, padding=2)),
                                 dg.nn.ReLU(), dg.nn.utils.weight_norm(dg.nn.Conv1d(4, 1, 1)))
        opt = dg.optim.Adam(model.parameters(), lr=0.01)

        def step(x):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            return loss

        run = dg.compile(step) if compiled else step
        x = dg.tensor(np.random.default_rng(1).normal(size=(3, 2, 8)).astype("f4"))
        losses.append([run(x).item() for _ in range(5)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert len(run.cache) <= 2     # the first call, and the optimiser's state made
