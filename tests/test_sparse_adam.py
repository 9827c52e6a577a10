"""SparseAdam against torch's: an embedding table with ``sparse=True`` (torch's gradient is
sparse, dualgraph's dense), rows reached by some steps and not others, eager and compiled."""
import numpy as np
import pytest
import torch

import dualgraph as dg


def _batches():
    rng = np.random.default_rng(0)
    # rows 0-3 only for the first steps, so rows 4-9 start late and row 9 is never reached
    return [rng.integers(0, 4 if k < 3 else 9, size=(5,)) for k in range(8)]


def _torch_run(w0, kwargs):
    emb = torch.nn.Embedding(10, 3, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.tensor(w0))
    opt = torch.optim.SparseAdam(emb.parameters(), **kwargs)
    for idx in _batches():
        opt.zero_grad()
        (emb(torch.tensor(idx)) ** 2).sum().backward()
        opt.step()
    return emb.weight.detach().numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.05, betas=(0.8, 0.9), eps=1e-3),
                                    dict(lr=0.1, maximize=True)])
def test_sparse_adam_updates_the_rows_reached_as_torch(kwargs, compiled):
    w0 = np.random.default_rng(1).standard_normal((10, 3)).astype(np.float32)
    emb = dg.nn.Embedding(10, 3, sparse=True)
    with dg.no_grad():
        emb.weight.copy_(dg.tensor(w0))
    opt = dg.optim.SparseAdam(emb.parameters(), **kwargs)

    def step(idx):
        opt.zero_grad()
        (emb(idx) ** 2).sum().backward()
        opt.step()
    run = dg.compile(step) if compiled else step
    for idx in _batches():
        run(dg.tensor(idx))
    ours = emb.weight.detach().numpy()
    np.testing.assert_allclose(ours, _torch_run(w0, kwargs), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ours[9], w0[9])       # never reached: untouched
    assert not np.array_equal(ours[5], w0[5])


def test_sparse_adam_state_and_errors():
    w = dg.tensor([1.0, 0.0, -2.0], requires_grad=True)
    opt = dg.optim.SparseAdam([w], lr=0.1)
    (w[0] * 3).backward()
    opt.step()
    state = opt.state_dict()["state"][0]
    assert float(state["step"]) == 1.0
    np.testing.assert_allclose(state["exp_avg"].numpy(), [0.3, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), [0.9, 0.0, -2.0], rtol=1e-6)
    with pytest.raises(ValueError, match="learning rate"):
        dg.optim.SparseAdam([w], lr=-1.0)
