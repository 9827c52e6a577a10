"""CTC (``F.ctc_loss``, ``nn.CTCLoss``) beyond the op table's rows: a small recognizer
trained a few steps against PyTorch, the compiled step against eager, torch's input forms
(unbatched, lengths as ints, lists or tensors), and the errors for bad lengths and labels."""
import numpy as np
import pytest
import torch

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F

T, N, C, S = 16, 4, 6, 5


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, N, 8)).astype(np.float32)
    targets = rng.integers(1, C, (N, S))
    targets[0, 1] = targets[0, 0]           # a repeated label needs a blank between
    return x, targets, [16, 14, 11, 9], [5, 3, 4, 0]


def _train(lib, steps=5, compile=False):
    """A linear-LSTM recognizer over (T, N, 8) frames, trained with Adam on CTC; losses."""
    rng = np.random.default_rng(1)
    lstm, head = lib.nn.LSTM(8, 12), lib.nn.Linear(12, C)
    for p in list(lstm.parameters()) + list(head.parameters()):
        p.data = lib.tensor(rng.normal(0, 0.3, tuple(p.shape)).astype(np.float32))
    params = list(lstm.parameters()) + list(head.parameters())
    opt = lib.optim.Adam(params, lr=0.05)
    ctc = lib.nn.CTCLoss(blank=0)
    x, targets, input_lengths, target_lengths = _batch()
    x, targets = lib.tensor(x), lib.tensor(targets)
    il, tl = lib.tensor(input_lengths), lib.tensor(target_lengths)

    def step(x, targets, il, tl):
        opt.zero_grad()
        loss = ctc(head(lstm(x)[0]).log_softmax(2), targets, il, tl)
        loss.backward()
        opt.step()
        return loss
    if compile:
        step = lib.compile(step)
    return [step(x, targets, il, tl).item() for _ in range(steps)]


def test_a_recognizer_trains_as_in_torch_eager_and_compiled():
    want = _train(torch)
    eager = _train(dg)
    compiled = _train(dg, compile=True)
    np.testing.assert_allclose(eager, want, rtol=2e-5)
    np.testing.assert_allclose(compiled, eager, rtol=1e-6)
    assert want[-1] < want[0]


@pytest.mark.parametrize("form", ["ints", "lists", "tensors"])
def test_lengths_in_torchs_forms_and_an_unbatched_input(form):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(7, 5))
    got = F.ctc_loss(dg.tensor(x).log_softmax(1), dg.tensor([1, 3, 3]),
                     *{"ints": (7, 3), "lists": ([7], [3]),
                       "tensors": (dg.tensor(7), dg.tensor(3))}[form], reduction="none")
    want = torch.nn.functional.ctc_loss(torch.tensor(x).log_softmax(1), torch.tensor([1, 3, 3]),
                                        (7,), (3,), reduction="none")
    assert got.shape == ()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)


def test_an_impossible_alignment_is_infinite_or_zero_as_in_torch():
    x = dg.tensor(np.zeros((2, 1, 3)), requires_grad=True)
    loss = F.ctc_loss(x.log_softmax(2), dg.tensor([[1, 1]]), [2], [2], reduction="sum")
    assert loss.item() == np.inf
    zeroed = F.ctc_loss(x.log_softmax(2), dg.tensor([[1, 1]]), [2], [2], reduction="sum",
                        zero_infinity=True)
    zeroed.backward()
    assert zeroed.item() == 0 and not x.grad.numpy().any()


@pytest.mark.parametrize("args,match", [
    (([17, 3, 3, 3], [2, 2, 2, 2]), r"input_lengths must be in \[0, 16\]"),
    (([16, 3, 3], [2, 2, 2, 2]), "one entry per sample"),
    (([16, 16, 16, 16], [2, 2, 9, 2]), r"S >= the longest target length 9"),
    (([16, 16, 16, 16], [2, -1, 2, 2]), "target_lengths must be >= 0"),
])
def test_bad_lengths_are_named(args, match):
    x, targets, _, _ = _batch()
    with pytest.raises(ValueError, match=match):
        F.ctc_loss(dg.tensor(x[..., :C]), dg.tensor(targets), *args)


def test_a_label_out_of_range_and_a_bad_blank_are_named():
    x, targets, il, tl = _batch()
    targets[1, 0] = C
    with pytest.raises(IndexError, match=r"outside \[0, 6\)"):
        F.ctc_loss(dg.tensor(x[..., :C]), dg.tensor(targets), il, tl)
    with pytest.raises(ValueError, match=r"blank must be in \[0, 6\)"):
        nn.CTCLoss(blank=6)(dg.tensor(x[..., :C]), dg.tensor(targets % C), il, tl)


def test_a_second_derivative_is_refused_as_in_torch():
    x, targets, il, tl = _batch()
    logits = dg.tensor(x[..., :C], requires_grad=True)
    loss = F.ctc_loss(logits.log_softmax(2), dg.tensor(targets), il, tl)
    with pytest.raises(RuntimeError, match="second derivative"):
        dg.autograd.grad(loss, logits, create_graph=True)
    loss = F.ctc_loss(logits.log_softmax(2), dg.tensor(targets), il, tl)
    g, = dg.autograd.grad(loss, logits)   # (a first derivative alone is fine)
    assert np.isfinite(g.numpy()).all()
