"""``nn.utils.prune`` (round 14's prune_utils met it missing) against PyTorch's: the masks
of each method, pruning the same parameter again (a PruningContainer: the new method prunes
among what the mask keeps), global pruning over several modules, the reparametrisation's
state-dict keys, the masked forward and its gradients, ``remove`` and ``is_pruned``."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.prune  # noqa: F401  (a submodule torch.nn.utils does not import)

import dualgraph as dg


def _model(lib):
    rng = np.random.default_rng(0)
    m = lib.nn.Sequential(lib.nn.Conv2d(2, 4, 3), lib.nn.ReLU(), lib.nn.Flatten(),
                          lib.nn.Linear(16, 5))
    m.load_state_dict({k: lib.tensor(rng.normal(0, 1, tuple(v.shape)).astype(np.float32))
                       for k, v in m.state_dict().items()})
    return m


def _prune_and_run(lib):
    prune = lib.nn.utils.prune
    m = _model(lib)
    prune.l1_unstructured(m[0], "weight", amount=0.3)
    prune.ln_structured(m[0], "weight", amount=1, n=2, dim=0)
    prune.l1_unstructured(m[0], "weight", amount=5)
    prune.ln_structured(m[3], "weight", amount=0.4, n=1, dim=1)
    prune.global_unstructured([(m[0], "weight"), (m[3], "weight"), (m[3], "bias")],
                              pruning_method=prune.L1Unstructured, amount=0.2)
    prune.identity(m[0], "bias")
    prune.custom_from_mask(m[0], "bias", lib.tensor([1.0, 0.0, 1.0, 1.0]))
    facts = [sorted(m.state_dict()), prune.is_pruned(m),
             [type(h).__name__ for h in m[0]._forward_pre_hooks.values()],
             len(list(m[0]._forward_pre_hooks.values())[0])]
    masks = [m[0].weight_mask, m[3].weight_mask, m[3].bias_mask, m[0].bias_mask]
    x = lib.tensor(np.linspace(-1, 1, 96).reshape(3, 2, 4, 4).astype(np.float32))
    y = m(x)
    (y ** 2).sum().backward()
    arrays = [t.detach().numpy().copy() for t in masks + [y, m[0].weight_orig.grad,
                                                          m[3].bias_orig.grad]]
    for module, name in [(m[0], "weight"), (m[0], "bias"), (m[3], "weight"), (m[3], "bias")]:
        prune.remove(module, name)
    facts += [sorted(m.state_dict()), prune.is_pruned(m), type(m[0].weight).__name__]
    arrays.append(m[0].weight.detach().numpy())
    return facts, arrays


def test_masks_reparametrisation_gradients_and_remove_match_torch():
    want_facts, want = _prune_and_run(torch)
    got_facts, got = _prune_and_run(dg)
    assert got_facts == want_facts
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_pruned_training_compiled_matches_eager():
    """The forward pre-hook recomputes the weight from weight_orig and the mask at every
    call; a compiled step trains weight_orig as eager does."""
    runs = []
    for compiled in (False, True):
        m = _model(dg)
        dg.nn.utils.prune.l1_unstructured(m[3], "weight", amount=0.5)
        opt = dg.optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        f = dg.compile(step) if compiled else step
        x = dg.tensor(np.linspace(-1, 1, 96).reshape(3, 2, 4, 4).astype(np.float32))
        runs.append([f(x).item() for _ in range(4)] + m[3].weight.flatten().tolist())
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)
    assert runs[0][-80:].count(0.0) == 40


def test_bad_amounts_and_remove_of_an_unpruned_parameter_raise_as_torch():
    prune = dg.nn.utils.prune
    lin = dg.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="float in the range"):
        prune.l1_unstructured(lin, "weight", amount=1.5)
    with pytest.raises(ValueError, match="smaller than the number of parameters"):
        prune.l1_unstructured(lin, "weight", amount=7)
    with pytest.raises(ValueError, match="has to be pruned before"):
        prune.remove(lin, "weight")
    with pytest.raises(ValueError, match="multidimensional"):
        prune.ln_structured(lin, "bias", amount=1, n=2, dim=0)
    assert not prune.is_pruned(lin)
