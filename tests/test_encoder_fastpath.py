"""``nn.TransformerEncoder`` in inference with a padding mask: torch runs its nested-tensor
fast path and gives zeros at the padded positions (then the final norm's bias); dualgraph
gives the same under the same conditions, eagerly and compiled (nn/encoder_fastpath.py).
Before, dualgraph returned what its layers computed there."""
import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg

RIGHT = [[False] * 6, [False, False, False, False, True, True], [False, True, True, True,
                                                                   True, True]]
LEFT = [[False] * 6, [True, True, False, False, False, False], [False] * 6]


def _pair(nhead=2, batch_first=True, norm_first=False, final_norm=False, activation="relu"):
    rng = np.random.default_rng(7)
    out = []
    for lib in (torch, dg):
        layer = lib.nn.TransformerEncoderLayer(8, nhead, 16, dropout=0.0,
                                               batch_first=batch_first,
                                               norm_first=norm_first, activation=activation)
        norm = lib.nn.LayerNorm(8) if final_norm else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(lib.nn.TransformerEncoder(layer, 2, norm=norm))
    with torch.no_grad():
        for (name, p), (_, q) in zip(out[0].named_parameters(), out[1].named_parameters()):
            value = rng.normal(0, 0.3, tuple(p.shape)).astype(np.float32)
            if name.endswith("norm.bias") or name.endswith("norm.weight"):
                value = value + (1.0 if name.endswith("weight") else 0.5)
            p.copy_(torch.from_numpy(value))
            with dg.no_grad():
                q.copy_(dg.tensor(value))
    return out


def _run(lib, enc, x, pad, grad=False, float_mask=False, **kw):
    mask = lib.tensor(pad)
    if float_mask:
        mask = lib.zeros(mask.shape).masked_fill(mask, float("-inf"))
    xs = lib.tensor(x)
    if not kw.get("batch_first", True):
        xs = xs.transpose(0, 1)
    with lib.set_grad_enabled(grad):
        y = enc(xs, src_key_padding_mask=mask)
    return y.detach().numpy()


CASES = {"plain": {}, "final norm": {"final_norm": True}, "gelu": {"activation": "gelu"},
         "odd heads": {"nhead": 1}, "norm first": {"norm_first": True},
         "sequence first": {"batch_first": False}}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("pad", [RIGHT, LEFT], ids=["right", "left"])
@pytest.mark.parametrize("mode", ["eval", "eval with grad", "train", "float mask"])
def test_padded_positions_match_torch(case, pad, mode):
    kw = CASES[case]
    x = np.random.default_rng(1).normal(size=(3, 6, 8)).astype(np.float32)
    theirs, ours = _pair(**kw)
    for enc in (theirs, ours):
        enc.train(mode == "train")
    extra = {"grad": mode == "eval with grad", "float_mask": mode == "float mask",
             "batch_first": kw.get("batch_first", True)}
    want = _run(torch, theirs, x, pad, **extra)
    got = _run(dg, ours, x, pad, **extra)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_fast_path_switch_and_compiled_model():
    x = np.random.default_rng(2).normal(size=(3, 6, 8)).astype(np.float32)
    theirs, ours = _pair(final_norm=True)
    theirs.eval(), ours.eval()
    want = _run(torch, theirs, x, RIGHT)
    assert np.all(want[2, 1:] == want[2, 1])   # (the norm's bias: the zeros normalised)
    compiled = dg.compile(ours)
    for _ in range(2):
        np.testing.assert_allclose(_run(dg, compiled, x, RIGHT), want, rtol=1e-4, atol=1e-5)
    torch.backends.mha.set_fastpath_enabled(False)
    dg.backends.mha.set_fastpath_enabled(False)
    try:
        want = _run(torch, theirs, x, RIGHT)
        np.testing.assert_allclose(_run(dg, ours, x, RIGHT), want, rtol=1e-4, atol=1e-5)
        assert not np.all(want[2, 1:] == want[2, 1])
        for _ in range(2):   # (the switch is a guard: the graph traced with it on is stale)
            np.testing.assert_allclose(_run(dg, compiled, x, RIGHT), want, rtol=1e-4,
                                       atol=1e-5)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
        dg.backends.mha.set_fastpath_enabled(True)
