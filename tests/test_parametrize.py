"""``nn.utils.parametrize`` and ``nn.utils.parametrizations`` against torch's: the same
state-dict keys, values and gradients from the same stored tensors (a custom parametrization
with and without ``right_inverse``, two chained, ``weight_norm`` and ``spectral_norm`` in
training and eval mode, on linear, convolution and transposed-convolution layers);
assignment, ``cached()``, ``remove_parametrizations`` and the errors; and compiled training
steps equal to eager ones."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)


def _symmetric(lib):
    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)
    return Symmetric()


def _positive(lib):
    class Positive(lib.nn.Module):   # (with right_inverse: the original is log(weight))
        def forward(self, X):
            return X.exp()

        def right_inverse(self, W):
            return W.abs().log()
    return Positive()


def _scale(lib):
    class Scale(lib.nn.Module):
        def forward(self, X):
            return 2 * X
    return Scale()


def _register(lib, layer, kind):
    P = lib.nn.utils.parametrize
    if kind == "symmetric":
        P.register_parametrization(layer, "weight", _symmetric(lib))
    elif kind == "positive":
        P.register_parametrization(layer, "weight", _positive(lib))
    elif kind == "chain":
        P.register_parametrization(layer, "weight", _symmetric(lib))
        P.register_parametrization(layer, "weight", _scale(lib))
    elif kind == "weight_norm":
        lib.nn.utils.parametrizations.weight_norm(layer, dim=0)
    elif kind == "weight_norm_all":
        lib.nn.utils.parametrizations.weight_norm(layer, dim=None)
    else:
        lib.nn.utils.parametrizations.spectral_norm(layer)
    return layer


def _same_state(layers) -> None:
    """Load the same drawn tensors (power-iteration vectors of unit norm) into the dualgraph
    and torch layers, by torch's state-dict keys."""
    state = {}
    for k, v in layers[1].state_dict().items():
        a = RNG.normal(size=tuple(v.shape)).astype("f4")
        state[k] = a / np.linalg.norm(a) if k.endswith(("_u", "_v")) else a
    for layer, lib in zip(layers, (dg, torch)):
        layer.load_state_dict({k: lib.tensor(v) for k, v in state.items()})


def _pair(make, kind, shape):
    """The same layer in both frameworks with the same parametrization and stored tensors."""
    layers = [_register(lib, make(lib), kind) for lib in (dg, torch)]
    _same_state(layers)
    return layers, RNG.normal(size=shape).astype("f4")


SQUARE = [(lambda lib: lib.nn.Linear(4, 4), (3, 4))]
ANY = SQUARE + [(lambda lib: lib.nn.Linear(5, 3), (2, 5)),
                (lambda lib: lib.nn.Conv2d(2, 3, 3), (2, 2, 5, 5)),
                (lambda lib: lib.nn.ConvTranspose2d(3, 2, 3, stride=2), (1, 3, 4, 4))]
CASES = ([(m, s, k) for m, s in SQUARE for k in ("symmetric", "positive", "chain")]
         + [(m, s, k) for m, s in ANY for k in ("weight_norm", "weight_norm_all", "spectral")])


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("make,shape,kind", CASES)
def test_values_gradients_and_state_match_torch(make, shape, kind, training):
    (d, t), x = _pair(make, kind, shape)
    assert list(d.state_dict()) == list(t.state_dict())
    assert [n for n, _ in d.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert type(d).__name__ == type(t).__name__   # (ParametrizedLinear, ...)
    results = []
    for layer, lib in ((d, dg), (t, torch)):
        layer.train(training)
        y = layer(lib.tensor(x))
        (y * y.tanh()).sum().backward()
        results.append([y.detach().numpy(), layer.weight.detach().numpy()]
                       + [p.grad.numpy() for _, p in layer.named_parameters()]
                       + [b.numpy() for _, b in layer.named_buffers()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6 + 2e-6 * np.abs(b).max())


def test_assignment_right_inverse_and_identity_of_the_original():
    layer = dg.nn.Linear(3, 3)
    w = layer.weight
    dg.nn.utils.parametrize.register_parametrization(layer, "weight", _symmetric(dg))
    assert layer.parametrizations.weight.original is w   # (no right_inverse: kept)
    pos = _register(dg, dg.nn.Linear(2, 2), "positive")
    target = dg.tensor([[1.0, 2.0], [0.5, 4.0]])
    pos.weight = target
    np.testing.assert_allclose(pos.parametrizations.weight.original.detach().numpy(),
                               np.log(target.numpy()), rtol=1e-6)
    np.testing.assert_allclose(pos.weight.detach().numpy(), target.numpy(), rtol=1e-6)
    with dg.nn.utils.parametrize.cached():
        assert pos.weight is pos.weight
    assert pos.weight is not pos.weight


def test_remove_parametrizations():
    for leave in (True, False):
        layer = _register(dg, dg.nn.Linear(3, 3), "positive")
        value = layer.weight.detach().numpy().copy()
        original = layer.parametrizations.weight.original.detach().numpy().copy()
        dg.nn.utils.parametrize.remove_parametrizations(layer, "weight", leave_parametrized=leave)
        assert type(layer) is dg.nn.Linear and not hasattr(layer, "parametrizations")
        assert isinstance(layer.weight, dg.nn.Parameter)
        np.testing.assert_allclose(layer.weight.detach().numpy(), value if leave else original)
        assert sorted(layer.state_dict()) == ["bias", "weight"]
    layer = _register(dg, dg.nn.Linear(3, 3), "weight_norm")
    with pytest.raises(ValueError, match="sequence of tensors"):
        dg.nn.utils.parametrize.remove_parametrizations(layer, "weight", False)
    assert dg.nn.utils.parametrize.is_parametrized(layer, "weight")
    assert dg.nn.utils.parametrize.type_before_parametrizations(layer) is dg.nn.Linear


def test_errors_name_the_tensor_and_what_to_do():
    P = dg.nn.utils.parametrize
    with pytest.raises(ValueError, match="does not have a parameter, a buffer.*'wieght'"):
        P.register_parametrization(dg.nn.Linear(2, 2), "wieght", _symmetric(dg))

    class Flatten(dg.nn.Module):
        def forward(self, X):
            return X.flatten()
    with pytest.raises(ValueError, match=r"shape or dtype.*unsafe=True.*\(2, 3\)"):
        P.register_parametrization(dg.nn.Linear(3, 2), "weight", Flatten())
    P.register_parametrization(dg.nn.Linear(3, 2), "weight", Flatten(), unsafe=True)


@pytest.mark.parametrize("kind", ["chain", "positive", "weight_norm", "spectral"])
def test_a_compiled_training_step_matches_eager(kind):
    """The parametrized weight is computed inside the graph at every call (spectral_norm's
    power iteration writing its buffers), the originals updated by the optimiser."""
    results = []
    for compiled in (False, True):
        rng = np.random.default_rng(3)
        net = dg.nn.Sequential(_register(dg, dg.nn.Linear(4, 4), kind), dg.nn.Tanh(),
                               dg.nn.Linear(4, 2))
        net.load_state_dict({k: dg.tensor(rng.normal(size=tuple(v.shape)).astype("f4")
                                          / (np.sqrt(v.numel()) if k.endswith(("_u", "_v"))
                                             else 1))
                             for k, v in net.state_dict().items()})
        opt = dg.optim.Adam(net.parameters(), lr=0.01)

        def step(x, y):
            opt.zero_grad()
            loss = ((net(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = dg.compile(step) if compiled else step
        losses = [fn(dg.tensor(rng.normal(size=(5, 4)).astype("f4")),
                     dg.tensor(rng.normal(size=(5, 2)).astype("f4"))).item() for _ in range(5)]
        results.append(losses + [v.numpy().ravel() for v in net.state_dict().values()])
        if compiled:
            assert not fn.eager_only and len(fn.cache) <= 3, fn.explain()
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("make,shape", ANY)
def test_hook_based_spectral_norm_matches_torch(make, shape, training):
    """``nn.utils.spectral_norm`` (``weight_orig``, ``weight_u``, ``weight_v``): two calls,
    so that the second uses the vectors the first one's power iteration left."""
    layers = [lib.nn.utils.spectral_norm(make(lib)) for lib in (dg, torch)]
    _same_state(layers)
    assert list(layers[0].state_dict()) == list(layers[1].state_dict())
    x = RNG.normal(size=shape).astype("f4")
    results = []
    for layer, lib in zip(layers, (dg, torch)):
        layer.train(training)
        y = layer(lib.tensor(x))
        y = layer(lib.tensor(x) * 0.5) + y
        (y * y).sum().backward()
        results.append([y.detach().numpy()] + [p.grad.numpy() for _, p in layer.named_parameters()]
                       + [b.numpy() for _, b in layer.named_buffers()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6 + 2e-6 * np.abs(b).max())
    dg.nn.utils.remove_spectral_norm(layers[0])
    assert not hasattr(type(layers[0]), "_spectral_norms")
    assert sorted(dict(layers[0].named_parameters())) == ["bias", "weight"]


def test_hook_based_spectral_norm_in_a_compiled_step():
    results = []
    for compiled in (False, True):
        rng = np.random.default_rng(4)
        net = dg.nn.Sequential(dg.nn.utils.spectral_norm(dg.nn.Linear(4, 4)), dg.nn.Tanh(),
                               dg.nn.utils.spectral_norm(dg.nn.Linear(4, 1)))
        net.load_state_dict({k: dg.tensor(rng.normal(size=tuple(v.shape)).astype("f4"))
                             for k, v in net.state_dict().items()})
        opt = dg.optim.Adam(net.parameters(), lr=0.01)

        def step(x):
            opt.zero_grad()
            loss = net(x).mean()
            loss.backward()
            opt.step()
            return loss

        fn = dg.compile(step) if compiled else step
        losses = [fn(dg.tensor(rng.normal(size=(5, 4)).astype("f4"))).item() for _ in range(4)]
        results.append(losses + [v.numpy().ravel() for v in net.state_dict().values()])
        if compiled:
            assert not fn.eager_only and len(fn.cache) <= 3, fn.explain()
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
