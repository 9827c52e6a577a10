"""Packed sequences (``nn.utils.rnn``, issue 24) against torch: packing and unpacking
(values, lengths, gradients), RNN / LSTM / GRU over a PackedSequence with torch's weights
(outputs at every valid step, padding untouched, each sequence's final state, gradients of
inputs, initial states and parameters), sorted and unsorted batches; and compiled ==
eager."""
import numpy as np
import pytest
import torch
import torch.nn.utils.rnn as trnn

import dualgraph as dg
import dualgraph.nn.utils.rnn as rnn
from test_nn_rnn import _pair
from torch_compare import TOL, check, randn

LENGTHS = {"sorted": [5, 3, 3, 1], "unsorted": [2, 5, 1, 4]}


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_pack_and_pad_match_torch(order, batch_first):
    lengths = LENGTHS[order]
    shape = (4, 5, 3) if batch_first else (5, 4, 3)

    def call(lib, x):
        utils = trnn if lib is torch else rnn
        packed = utils.pack_padded_sequence(x, lengths, batch_first=batch_first,
                                            enforce_sorted=order == "sorted")
        padded, out_lengths = utils.pad_packed_sequence(packed, batch_first=batch_first,
                                                        padding_value=-1.0, total_length=6)
        assert out_lengths.tolist() == lengths
        assert packed.batch_sizes.tolist() == [sum(n > t for n in lengths) for t in range(5)]
        return packed.data * 2, padded
    check(torch, dg, [randn(*shape)], call)


def test_pack_sequence_and_unpack():
    seqs = [randn(n, 2, seed=n) for n in (3, 5, 2)]
    ours = rnn.pack_sequence([dg.tensor(s) for s in seqs], enforce_sorted=False)
    ref = trnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(ours.data.numpy(), ref.data.numpy())
    assert ours.sorted_indices.tolist() == ref.sorted_indices.tolist()
    assert ours.unsorted_indices.tolist() == ref.unsorted_indices.tolist()
    for a, b in zip(rnn.unpack_sequence(ours), seqs):
        np.testing.assert_array_equal(a.numpy(), b)


def test_bad_lengths_raise_clear_errors():
    x = dg.zeros(4, 3, 2)
    with pytest.raises(RuntimeError, match=r"sorted in decreasing order .*\[1, 4, 2\]"):
        rnn.pack_padded_sequence(x, [1, 4, 2])
    with pytest.raises(ValueError, match="between 1 and the padded length 4"):
        rnn.pack_padded_sequence(x, [5, 1, 1])
    with pytest.raises(ValueError, match="expected 3 lengths"):
        rnn.pack_padded_sequence(x, [2, 1])


CONFIGS = [dict(), dict(bidirectional=True), dict(num_layers=2, batch_first=True),
           dict(num_layers=2, bidirectional=True, batch_first=True)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_recurrent_layers_over_packed_sequences_match_torch(name, cfg, order):
    lengths = LENGTHS[order]
    ref, ours = _pair(name, 3, 4, **cfg)
    batch_first = cfg.get("batch_first", False)
    layers = cfg.get("num_layers", 1) * (2 if cfg.get("bidirectional") else 1)
    arrays = [randn(*((4, 5, 3) if batch_first else (5, 4, 3))),
              randn(layers, 4, 4, seed=2)] + ([randn(layers, 4, 4, seed=3)]
                                              if name == "LSTM" else [])

    def call(module, x, *hx):
        utils = trnn if isinstance(module, torch.nn.Module) else rnn
        packed = utils.pack_padded_sequence(x, lengths, batch_first=batch_first,
                                            enforce_sorted=order == "sorted")
        out, h_n = module(packed, tuple(hx) if name == "LSTM" else hx[0])
        padded, _ = utils.pad_packed_sequence(out, batch_first=batch_first)
        return out.data, padded, h_n
    check(ref, ours, arrays, call, tol=TOL)


def _classifier(seed=0):
    dg.manual_seed(seed)
    return dg.nn.LSTM(3, 6, batch_first=True), dg.nn.Linear(6, 2)


def test_compiled_step_over_packed_batches_equals_eager():
    """A training step packing a padded batch of lengths given as a Python list: eager
    and compiled give the same losses and parameters, also when the lengths change."""
    results = []
    for compiled in (False, True):
        lstm, head = _classifier()
        params = list(lstm.parameters()) + list(head.parameters())
        opt = dg.optim.Adam(params, lr=0.01)

        def step(x, lengths, y):
            opt.zero_grad()
            packed = rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                              enforce_sorted=False)
            _, (h, _) = lstm(packed)
            loss = dg.nn.functional.cross_entropy(head(h[-1]), y)
            loss.backward()
            opt.step()
            return loss
        step = dg.compile(step) if compiled else step
        losses = []
        for i, lengths in enumerate([[3, 5, 2, 4], [3, 5, 2, 4], [5, 1, 1, 2], [3, 5, 2, 4]]):
            x = dg.tensor(randn(4, 5, 3, seed=i).astype(np.float32))
            y = dg.tensor([0, 1, 1, 0])
            losses.append(step(x, lengths, y).item())
        results.append((losses, [p.detach().numpy().copy() for p in params]))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    for a, b in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
