"""The lowering rule ``fuse_attention`` on whole transformer blocks: generated blocks (heads,
widths, pre/post-norm, causal and padding masks written as users write them and through
``F.scaled_dot_product_attention``) compiled give what eager dualgraph and torch give, with
the attention fused where nothing else reads the weights (inference) and the ops kept
where something does (training: the backward; dropout on the weights); and a torch
encoder exported to ONNX and loaded with ``dg.onnx.load`` gives what onnxruntime gives."""
import math

import numpy as np
import pytest
import torch

import dualgraph as dg


def block(lib, width, heads, pre_norm, mask_kind, sdpa, dropout=0.0):
    """A transformer block written once against the torch-style API of ``lib``."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.ffn = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                     nn.Linear(2 * width, width))
            self.drop = nn.Dropout(dropout)

        def attend(self, x, pad):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (y.view(b, t, heads, d // heads).transpose(1, 2) for y in (q, k, v))
            if sdpa:
                mask = None if mask_kind != "padding" else ~pad[:, None, None, :]
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                   is_causal=mask_kind == "causal")
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
                if mask_kind == "causal":
                    causal = lib.ones(t, t).tril() == 0
                    att = att.masked_fill(causal, float("-inf"))
                elif mask_kind == "padding":     # an additive float mask
                    att = att + pad[:, None, None, :].float() * -1e4
                y = self.drop(att.softmax(dim=-1)) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

        def forward(self, x, pad):
            if pre_norm:
                x = x + self.attend(self.ln1(x), pad)
                return x + self.ffn(self.ln2(x))
            x = self.ln1(x + self.attend(x, pad))
            return self.ln2(x + self.ffn(x))
    return Block()


def inputs(seed, batch, seq, width):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, seq, width)).astype(np.float32)
    pad = np.zeros((batch, seq), bool)
    pad[:, seq - 1 - seed % 3:] = True     # the last keys of each sequence are padding
    return x, pad


def twins(seed, width, heads, pre_norm, mask_kind, sdpa, dropout=0.0):
    """The block in dualgraph and torch with the same weights."""
    torch.manual_seed(seed)
    ref = block(torch, width, heads, pre_norm, mask_kind, sdpa, dropout)
    ours = block(dg, width, heads, pre_norm, mask_kind, sdpa, dropout)
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in
                          ref.state_dict().items()})
    return ours, ref


def attention_nodes(compiled) -> list:
    return [n for n in compiled._last.graph.nodes if n.op.name == "attention"]


CASES = [(seed, width, heads, pre_norm, mask_kind, sdpa)
         for seed, (width, heads, pre_norm) in enumerate([(32, 4, False), (48, 3, True),
                                                          (64, 1, False), (40, 5, True)])
         for mask_kind in ("none", "causal", "padding") for sdpa in (False, True)]


@pytest.mark.parametrize("seed,width,heads,pre_norm,mask_kind,sdpa", CASES)
def test_compiled_block_equals_eager_and_torch_with_the_attention_fused(
        seed, width, heads, pre_norm, mask_kind, sdpa):
    ours, ref = twins(seed, width, heads, pre_norm, mask_kind, sdpa)
    ours.eval(), ref.eval()
    x, pad = inputs(seed, 2 + seed % 2, 5 + 3 * seed, width)
    compiled = dg.compile(ours)
    with dg.no_grad(), torch.no_grad():
        got = compiled(dg.tensor(x), dg.tensor(pad)).numpy()
        eager = ours(dg.tensor(x), dg.tensor(pad)).numpy()
        want = ref(torch.tensor(x), torch.tensor(pad)).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    fused = attention_nodes(compiled)
    if sdpa and mask_kind == "padding":   # (a bool mask may hide every key: kept as ops)
        assert not fused
    else:
        assert len(fused) == 1 and fused[0].attrs["heads_out"]


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_training_keeps_the_ops_and_matches_eager(dropout):
    """In training the backward reads the attention weights: the rule leaves the ops. The
    compiled step's loss and gradients are those of the step compiled without the rule,
    dropout drawn from the same seed (compiled code draws its own stream), and without
    dropout eager's."""
    ours, _ = twins(1, 32, 4, True, "causal", False, dropout)
    ours.train()
    x, pad = inputs(1, 2, 6, 32)

    def step(fn):
        ours.zero_grad()
        dg.manual_seed(7)
        loss = fn(dg.tensor(x), dg.tensor(pad)).square().mean()
        loss.backward()
        return [loss.item()] + [p.grad.numpy().copy() for p in ours.parameters()]
    compiled = dg.compile(ours)
    got = step(compiled)
    want = step(dg.compile(ours, passes={"fuse_attention": False}) if dropout else ours)
    assert not attention_nodes(compiled)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_onnx_loaded_torch_encoder_equals_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = np.random.default_rng(0).standard_normal((2, 7, 32)).astype(np.float32)
    path = str(tmp_path / "encoder.onnx")
    torch.onnx.export(encoder, (torch.tensor(x),), path, input_names=["x"], dynamo=False)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    model = dg.onnx.load(path)
    got = model(dg.tensor(x))
    got = (got[0] if isinstance(got, (tuple, list)) else got).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
