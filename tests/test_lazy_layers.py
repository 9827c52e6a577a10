"""Lazy layers (``nn.LazyLinear``, ``LazyConv*``, ``LazyConvTranspose*``, ``LazyBatchNorm*``,
``LazyInstanceNorm*``) against torch's: what the first call makes (shapes, the class it
becomes, the size attributes), the outputs with the same weights, an optimiser made before
the first call, loading a state dict into a lazy model, and a first call under
``dg.compile``."""
import numpy as np
import pytest
import torch

import dualgraph as dg

CASES = [   # (class name, constructor arguments, input shape)
    ("LazyLinear", (5,), (3, 7)),
    ("LazyLinear", (4, False), (2, 3, 6)),
    ("LazyConv1d", (4, 3), (2, 6, 9)),
    ("LazyConv2d", (6, 3, 1, 1), (2, 4, 7, 7)),
    ("LazyConv2d", (6, 3), (4, 7, 7)),                     # unbatched
    ("LazyConv2d", (8, 3, 2, 1, 1, 2, False), (2, 4, 9, 9)),   # groups, no bias
    ("LazyConv3d", (2, 2), (1, 3, 4, 4, 4)),
    ("LazyConvTranspose1d", (3, 4, 2), (2, 5, 6)),
    ("LazyConvTranspose2d", (4, 2, 2, 0, 0, 2), (2, 6, 5, 5)),   # groups
    ("LazyBatchNorm1d", (), (8, 5)),
    ("LazyBatchNorm2d", (1e-3, 0.2), (4, 3, 5, 5)),
    ("LazyBatchNorm3d", (), (2, 3, 2, 3, 3)),
    ("LazyInstanceNorm1d", (), (2, 5, 6)),
    ("LazyInstanceNorm2d", (1e-5, 0.1, True, False), (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), (1, 2, 3, 3, 3)),
]


def _same_weights(dg_layer, torch_layer, rng):
    for name, t in torch_layer.state_dict().items():
        if t.dtype.is_floating_point and t.numel():
            values = rng.normal(0.5, 0.3, tuple(t.shape)).astype(np.float32)
            if "running_var" in name:
                values = np.abs(values) + 0.5
            t.copy_(torch.tensor(values))
    dg_layer.load_state_dict({k: dg.tensor(v.numpy()) for k, v in
                              torch_layer.state_dict().items()})


@pytest.mark.parametrize("name,args,shape", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_first_call_makes_torchs_layer(name, args, shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    mine, theirs = getattr(dg.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert mine.has_uninitialized_params() == theirs.has_uninitialized_params()
    mine(dg.tensor(x))
    theirs(torch.tensor(x))
    assert type(mine).__name__ == type(theirs).__name__ == name[len("Lazy"):]
    assert repr(mine) == repr(theirs)
    assert {k: tuple(v.shape) for k, v in mine.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert all(type(p) is dg.nn.Parameter for p in mine.parameters())
    mine.eval(), theirs.eval()
    with torch.no_grad():
        _same_weights(mine, theirs, rng)
    np.testing.assert_allclose(mine(dg.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_an_optimiser_made_before_the_first_call_trains_the_made_parameters():
    model = dg.nn.Sequential(dg.nn.LazyConv2d(4, 3), dg.nn.ReLU(), dg.nn.Flatten(),
                             dg.nn.LazyLinear(2))
    opt = dg.optim.Adam(model.parameters(), lr=0.1)
    x = dg.randn(2, 3, 6, 6)
    before = None
    for _ in range(3):
        loss = model(x).square().mean()
        if before is None:
            before = [p.detach().clone() for p in model.parameters()]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert [tuple(p.shape) for p in model.parameters()] == [(4, 3, 3, 3), (4,), (2, 64), (2,)]
    assert all((p.detach() != b).any() for p, b in zip(model.parameters(), before))


def test_a_state_dict_loads_into_a_lazy_model_and_sets_its_sizes():
    def make():
        return dg.nn.Sequential(dg.nn.LazyConv1d(3, 2), dg.nn.LazyBatchNorm1d(),
                                dg.nn.Flatten(), dg.nn.LazyLinear(2))
    trained = make()
    x = dg.randn(4, 5, 8)
    trained(x)
    trained.eval()
    loaded = make()
    loaded.load_state_dict(trained.state_dict())
    loaded.eval()
    np.testing.assert_array_equal(loaded(x).detach().numpy(), trained(x).detach().numpy())
    assert (loaded[0].in_channels, loaded[1].num_features, loaded[3].in_features) == (5, 3, 21)


def test_a_first_call_under_compile_runs_eagerly_and_the_next_traces_one_graph():
    def make():
        return dg.nn.Sequential(dg.nn.LazyLinear(5), dg.nn.Tanh(), dg.nn.Dropout(0.3),
                                dg.nn.LazyLinear(2))
    x = dg.randn(3, 7)
    eager_model, compiled = make(), dg.compile(make())
    dg.manual_seed(1)
    want = [eager_model(x) for _ in range(3)]   # (the dropout draws after the init's)
    dg.manual_seed(1)
    got = [compiled(x) for _ in range(3)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.detach().numpy(), w.detach().numpy())
    assert len(compiled.cache) == 1 and not compiled.eager_only
    assert "LazyLinear (a lazy layer: it creates its parameters): this call runs eagerly, " \
           "the next traces" in compiled.explain()


def test_a_lazy_model_called_once_compiles_to_one_graph():
    model = dg.nn.Sequential(dg.nn.LazyLinear(5), dg.nn.Tanh(), dg.nn.LazyLinear(2))
    x = dg.randn(3, 7)
    want = model(x)
    compiled = dg.compile(model)
    np.testing.assert_array_equal(compiled(x).detach().numpy(), want.detach().numpy())
    assert len(compiled.cache) == 1 and not compiled.eager_only


def test_channels_that_groups_do_not_divide_are_named():
    with pytest.raises(ValueError, match=r"in_channels \(5, from the input\) must be "
                                         r"divisible by groups \(2\)"):
        dg.nn.LazyConv2d(4, 3, groups=2)(dg.randn(1, 5, 6, 6))


def test_a_norm_with_nothing_to_make_still_takes_its_size():
    """(torch's keeps num_features 0 there, so its repr says 0; its forward never checks.)"""
    layer = dg.nn.LazyInstanceNorm1d(affine=False, track_running_stats=False)
    x = dg.randn(2, 3, 6)
    np.testing.assert_allclose(layer(x).detach().numpy(),
                               dg.nn.InstanceNorm1d(3)(x).detach().numpy(), rtol=1e-6)
    assert type(layer) is dg.nn.InstanceNorm1d and layer.num_features == 3


def test_an_unbatched_instance_norm_reads_its_channels_from_dim_0():
    layer = dg.nn.LazyInstanceNorm2d()
    x = dg.randn(3, 4, 5)
    want = dg.nn.InstanceNorm2d(3, affine=True, track_running_stats=True)(x)
    np.testing.assert_allclose(layer(x).detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert layer.num_features == 3
