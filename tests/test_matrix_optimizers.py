"""Muon and Adafactor (``dualgraph/optim/matrix.py``) against torch.optim's over several
steps of a small model, compiled steps against eager ones, their argument checks; and the
half-precision ``addmm`` / ``baddbmm`` they rely on (Muon's Newton-Schulz iteration runs in
bfloat16), rounded once as torch's."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dualgraph as dg  # noqa: E402

RNG = np.random.default_rng(11)


def _loss(lib, params, inputs):
    """A loss that reads every parameter: ``tanh(x @ W)^2`` for matrices, ``sin(p) p``
    for the rest."""
    total = 0
    for p, x in zip(params, inputs):
        total = total + ((lib.tensor(x) @ p).tanh().square().sum() if x is not None
                         else (p.sin() * p).sum())
    return total


def _train_both(name, kwargs, shapes, steps=5):
    weights = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    inputs = [RNG.standard_normal((3, s[-2])).astype(np.float32) if len(s) >= 2 else None
              for s in shapes]
    ours = [dg.nn.Parameter(dg.tensor(w)) for w in weights]
    theirs = [torch.nn.Parameter(torch.tensor(w)) for w in weights]
    opt, topt = getattr(dg.optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs,
                                                                                    **kwargs)
    for _ in range(steps):
        for params, optimiser, lib in ((ours, opt, dg), (theirs, topt, torch)):
            optimiser.zero_grad()
            _loss(lib, params, inputs).backward()
            optimiser.step()
    return ours, theirs, weights, opt, topt


@pytest.mark.parametrize("kwargs", [
    dict(lr=0.02),
    dict(lr=0.02, nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, ns_steps=3, adjust_lr_fn="original"),
])
def test_muon_matches_torch(kwargs):
    ours, theirs, start, opt, topt = _train_both("Muon", kwargs, [(6, 4), (3, 8), (8, 8)])
    for p, t, w in zip(ours, theirs, start):
        assert np.abs(t.detach().numpy() - w).max() > 1e-2   # (it moved)
        np.testing.assert_allclose(p.detach().numpy(), t.detach().numpy(), atol=2e-7)
    assert sorted(opt.state_dict()["state"][0]) == sorted(topt.state_dict()["state"][0])
    np.testing.assert_allclose(opt.state[ours[0]]["momentum_buffer"].numpy(),
                               topt.state[theirs[0]]["momentum_buffer"].numpy(), atol=1e-6)


@pytest.mark.parametrize("kwargs", [
    {},
    dict(lr=0.05, weight_decay=0.1, maximize=True, d=2.0, eps=(1e-20, 1e-3),
         beta2_decay=-0.5),
])
def test_adafactor_matches_torch(kwargs):
    ours, theirs, start, opt, topt = _train_both("Adafactor", kwargs,
                                                 [(6, 4), (5,), (2, 3, 4)])
    for p, t, w in zip(ours, theirs, start):
        assert np.abs(t.detach().numpy() - w).max() > 1e-2
        np.testing.assert_allclose(p.detach().numpy(), t.detach().numpy(), atol=1e-6)
    state, tstate = opt.state_dict()["state"], topt.state_dict()["state"]
    for index in state:
        assert sorted(state[index]) == sorted(tstate[index])
        for key in state[index]:
            np.testing.assert_allclose(np.asarray(state[index][key].numpy(), np.float64),
                                       tstate[index][key].double().numpy(), rtol=1e-5,
                                       atol=1e-8)


@pytest.mark.parametrize("name,kwargs", [("Muon", dict(lr=0.02)), ("Adafactor", {})])
def test_compiled_step_matches_eager(name, kwargs):
    def make():
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(5, 8, bias=False), dg.nn.Tanh(),
                                 dg.nn.Linear(8, 2, bias=False))
        return model, getattr(dg.optim, name)(model.parameters(), **kwargs)
    x, y = dg.randn(4, 5), dg.randn(4, 2)

    def step(model, opt):
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        return loss
    eager_model, eager_opt = make()
    model, opt = make()
    compiled = dg.compile(lambda: step(model, opt))
    for _ in range(4):
        want, got = step(eager_model, eager_opt), compiled()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    for a, b in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-6)


def test_argument_checks():
    with pytest.raises(ValueError, match="2D parameters"):
        dg.optim.Muon([dg.nn.Parameter(dg.zeros(3))])
    with pytest.raises(ValueError, match="not supported"):
        dg.optim.Muon([dg.nn.Parameter(dg.zeros(3, 2))], adjust_lr_fn="other")
    with pytest.raises(ValueError, match="beta2_decay"):
        dg.optim.Adafactor([dg.nn.Parameter(dg.zeros(3))], beta2_decay=0.5)
    with pytest.raises(ValueError, match="Clipping threshold"):
        dg.optim.Adafactor([dg.nn.Parameter(dg.zeros(3))], d=0.5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (-4.775, 2.0315), (0, 3.0), (0.5, 1)])
def test_half_precision_addmm_rounds_once_as_torch(dtype, beta, alpha):
    a = RNG.standard_normal((5, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 6)).astype(np.float32)
    c = RNG.standard_normal((5, 6)).astype(np.float32)
    td, dd = getattr(torch, dtype), getattr(dg, dtype)
    ta, tb, tc = (torch.tensor(v).to(td) for v in (a, b, c))
    da, db, dc = (dg.tensor(v).to(dd) for v in (a, b, c))
    want = torch.addmm(tc, ta, tb, beta=beta, alpha=alpha)
    got = dg.addmm(dc, da, db, beta=beta, alpha=alpha)
    assert got.dtype == dd
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    want = torch.baddbmm(tc.expand(2, 5, 6), ta.expand(2, 5, 4), tb.expand(2, 4, 6), beta=beta,
                         alpha=alpha)
    got = dg.baddbmm(dc.expand(2, 5, 6), da.expand(2, 5, 4), db.expand(2, 4, 6), beta=beta,
                     alpha=alpha)
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


def test_autocast_addmm_rounds_once_as_torch():
    a, b, c = (RNG.standard_normal(s).astype(np.float32) for s in ((5, 4), (4, 6), (5, 6)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.addmm(torch.tensor(c), torch.tensor(a), torch.tensor(b), beta=0.5,
                           alpha=2.0)
    with dg.autocast("cpu", dtype=dg.bfloat16):
        got = dg.addmm(dg.tensor(c), dg.tensor(a), dg.tensor(b), beta=0.5, alpha=2.0)
    assert got.dtype == dg.bfloat16
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
