"""scaled_dot_product_attention, MultiheadAttention and the Transformer modules against torch
with identical weights: outputs, attention weights, gradients of inputs and parameters;
state_dict keys, repr, init, masks of both kinds, eval mode (dropout off)."""
import math

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.nn import attention as A
from dualgraph.nn.layers import GELU, LayerNorm
from torch_compare import check, load_from_torch, randn

TF = torch.nn.functional


def _pair(name, *args, **kwargs):
    """torch's module (float64, eval) and ours with its weights, by state_dict name."""
    ref = getattr(torch.nn, name)(*args, **kwargs).double().eval()
    ours = getattr(A, name)(*args, **kwargs).double().eval()
    return ref, load_from_torch(ours, ref)


def _bool(shape, seed, p=0.3):
    """A random bool mask with a True in every row (so no row is entirely one value)."""
    mask = np.random.default_rng(seed).random(shape) < p
    mask[..., 0] = True
    return mask


# -- scaled_dot_product_attention -------------------------------------------------------------
B, H, L, S, E = 2, 3, 4, 5, 6


def _sdpa(lib, *tensors, **kwargs):
    fn = TF.scaled_dot_product_attention if lib is TF else A.scaled_dot_product_attention
    return fn(*tensors, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.3}], ids=str)
@pytest.mark.parametrize("q_len,k_len", [(L, S), (S, S), (S, L)])
def test_sdpa_matches_torch(kwargs, q_len, k_len):
    arrays = [randn(B, H, q_len, E, seed=1), randn(B, H, k_len, E, seed=2),
              randn(B, H, k_len, E + 1, seed=3)]
    check(TF, A, arrays, lambda lib, q, k, v: _sdpa(lib, q, k, v, **kwargs))


@pytest.mark.parametrize("mask_shape", [(L, S), (B, 1, L, S), (B, H, L, S)])
def test_sdpa_masks_match_torch(mask_shape):
    q, k, v = randn(B, H, L, E, seed=1), randn(B, H, S, E, seed=2), randn(B, H, S, E, seed=3)
    keep = _bool(mask_shape, seed=4, p=0.6)
    check(TF, A, [q, k, v, keep], lambda lib, q, k, v, m: _sdpa(lib, q, k, v, attn_mask=m))
    additive = randn(*mask_shape, seed=5)
    check(TF, A, [q, k, v, additive],
          lambda lib, q, k, v, m: _sdpa(lib, q, k, v, attn_mask=m))


def test_sdpa_fully_masked_row_gives_zeros_like_torch():
    q, k, v = randn(H, L, E, seed=1), randn(H, S, E, seed=2), randn(H, S, E, seed=3)
    keep = _bool((L, S), seed=4)
    keep[1] = False
    out = A.scaled_dot_product_attention(*map(dg.tensor, (q, k, v)), attn_mask=dg.tensor(keep))
    ref = TF.scaled_dot_product_attention(*map(torch.tensor, (q, k, v)),
                                          attn_mask=torch.tensor(keep))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
    assert not np.isnan(out.numpy()).any() and np.all(out.numpy()[:, 1] == 0)


def test_sdpa_grouped_query_attention():
    arrays = [randn(B, 4, L, E, seed=1), randn(B, 2, S, E, seed=2), randn(B, 2, S, E, seed=3)]
    check(TF, A, arrays, lambda lib, q, k, v: _sdpa(lib, q, k, v, enable_gqa=True))


def test_sdpa_dropout_and_errors():
    q = dg.randn(B, H, L, E)
    plain = A.scaled_dot_product_attention(q, q, q).numpy()
    dropped = A.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    assert dropped.shape == plain.shape and not np.allclose(dropped, plain)
    with pytest.raises(RuntimeError, match="is_causal"):
        A.scaled_dot_product_attention(q, q, q, attn_mask=dg.ones(L, L, dtype=dg.bool),
                                       is_causal=True)
    with pytest.raises(ValueError, match="same last dim"):
        A.scaled_dot_product_attention(q, dg.randn(B, H, L, E + 1), q)


# -- MultiheadAttention -----------------------------------------------------------------------
EMBED, HEADS, TGT, SRC, BATCH = 8, 2, 3, 5, 2

MHA_CONFIGS = [
    dict(),
    dict(batch_first=True),
    dict(bias=False),
    dict(kdim=5, vdim=7),
    dict(add_bias_kv=True, add_zero_attn=True),
]


def _seq(n, batch_first, dim=EMBED, seed=0):
    return randn(BATCH, n, dim, seed=seed) if batch_first else randn(n, BATCH, dim, seed=seed)


@pytest.mark.parametrize("cfg", MHA_CONFIGS, ids=str)
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_mha_cross_attention_matches_torch(cfg, need_weights, average):
    bf = cfg.get("batch_first", False)
    arrays = [_seq(TGT, bf, seed=1), _seq(SRC, bf, cfg.get("kdim", EMBED), seed=2),
              _seq(SRC, bf, cfg.get("vdim", EMBED), seed=3)]
    ref, ours = _pair("MultiheadAttention", EMBED, HEADS, **cfg)
    check(ref, ours, arrays, lambda m, q, k, v: m(q, k, v, need_weights=need_weights,
                                                  average_attn_weights=average))


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
@pytest.mark.parametrize("cfg,need_weights", [({}, True), ({}, False),
                                              (dict(batch_first=True), False),
                                              (dict(add_bias_kv=True), True)], ids=str)
def test_mha_self_attention_with_masks(cfg, need_weights):
    bf = cfg.get("batch_first", False)
    x = _seq(SRC, bf, seed=1)
    padding = _bool((BATCH, SRC), seed=2)
    padding[:, 0] = False   # every query keeps a visible key
    masks = {
        "padding": (padding, None),
        "bool attn": (None, _bool((SRC, SRC), seed=3) & ~np.eye(SRC, dtype=bool)),
        "float 3-D attn": (None, randn(BATCH * HEADS, SRC, SRC, seed=4)),
        "both": (padding, randn(SRC, SRC, seed=5)),
    }
    for key_padding_mask, attn_mask in masks.values():
        arrays = [x] + [m for m in (key_padding_mask, attn_mask) if m is not None]

        def call(m, x, *given):
            it = iter(given)
            kpm = next(it) if key_padding_mask is not None else None
            am = next(it) if attn_mask is not None else None
            return m(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=need_weights,
                     average_attn_weights=False)
        ref, ours = _pair("MultiheadAttention", EMBED, HEADS, **cfg)
        check(ref, ours, arrays, call)


def test_mha_causal_hint_and_unbatched():
    causal = np.triu(np.full((SRC, SRC), -np.inf), 1)
    for need_weights in (True, False):
        ref, ours = _pair("MultiheadAttention", EMBED, HEADS)
        check(ref, ours, [randn(SRC, BATCH, EMBED, seed=1), causal],
              lambda m, x, mask: m(x, x, x, attn_mask=mask, is_causal=True,
                                   need_weights=need_weights))
    ref, ours = _pair("MultiheadAttention", EMBED, HEADS, batch_first=True)
    padding = np.array([False, False, True, False, True])
    check(ref, ours, [randn(TGT, EMBED, seed=1), randn(SRC, EMBED, seed=2), padding],
          lambda m, q, kv, p: m(q, kv, kv, key_padding_mask=p))


def test_mha_structure_and_init_match_torch():
    for kwargs in (dict(), dict(kdim=3, vdim=5, add_bias_kv=True, bias=False)):
        ref = torch.nn.MultiheadAttention(EMBED, HEADS, **kwargs)
        ours = A.MultiheadAttention(EMBED, HEADS, **kwargs)
        assert repr(ours) == repr(ref)
        assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
            [(k, tuple(v.shape)) for k, v in ref.state_dict().items()]
    mha = A.MultiheadAttention(EMBED, HEADS)
    assert not mha.in_proj_bias.detach().numpy().any()
    assert not mha.out_proj.bias.detach().numpy().any()
    bound = math.sqrt(6 / (EMBED + 3 * EMBED))   # xavier_uniform_ on (3E, E)
    assert np.abs(mha.in_proj_weight.detach().numpy()).max() <= bound
    with pytest.raises(AssertionError, match="divisible"):
        A.MultiheadAttention(EMBED, 3)


def test_mha_dropout_only_in_training():
    mha = A.MultiheadAttention(EMBED, HEADS, dropout=0.5)
    x = dg.randn(SRC, BATCH, EMBED)
    runs = [mha(x, x, x)[1].detach().numpy() for _ in range(2)]
    assert not np.allclose(*runs)
    mha.eval()
    runs = [mha(x, x, x)[1].detach().numpy() for _ in range(2)]
    np.testing.assert_array_equal(*runs)


# -- Transformer layers and stacks ------------------------------------------------------------
D_MODEL, NHEAD, FF = 8, 2, 12
LAYER_CONFIGS = [
    dict(),
    dict(norm_first=True, activation="gelu"),
    dict(batch_first=True, activation="gelu"),
    dict(norm_first=True, batch_first=True, bias=False),
]


def _layer_args(cfg):
    return (D_MODEL, NHEAD), dict(dim_feedforward=FF, **cfg)


@pytest.mark.parametrize("cfg", LAYER_CONFIGS, ids=str)
def test_encoder_layer_matches_torch(cfg):
    args, kwargs = _layer_args(cfg)
    bf = cfg.get("batch_first", False)
    ref, ours = _pair("TransformerEncoderLayer", *args, **kwargs)
    padding = _bool((BATCH, SRC), seed=2)
    padding[:, 0] = False
    padding = np.where(padding, -np.inf, 0.0)   # float, as the mask (torch warns on a mix)
    mask = np.triu(np.full((SRC, SRC), -np.inf), 1)
    check(ref, ours, [_seq(SRC, bf, D_MODEL, seed=1), mask, padding],
          lambda m, x, mask, pad: m(x, src_mask=mask, src_key_padding_mask=pad))
    ref, ours = _pair("TransformerEncoderLayer", *args, **kwargs)
    check(ref, ours, [_seq(SRC, bf, D_MODEL, seed=1)], lambda m, x: m(x))


@pytest.mark.parametrize("cfg", LAYER_CONFIGS, ids=str)
def test_decoder_layer_matches_torch(cfg):
    args, kwargs = _layer_args(cfg)
    bf = cfg.get("batch_first", False)
    ref, ours = _pair("TransformerDecoderLayer", *args, **kwargs)
    tgt_mask = np.triu(np.full((TGT, TGT), -np.inf), 1)
    memory_padding = _bool((BATCH, SRC), seed=2)
    memory_padding[:, 0] = False
    arrays = [_seq(TGT, bf, D_MODEL, seed=1), _seq(SRC, bf, D_MODEL, seed=3), tgt_mask,
              memory_padding]
    check(ref, ours, arrays,
          lambda m, t, mem, tm, mp: m(t, mem, tgt_mask=tm, memory_key_padding_mask=mp,
                                      tgt_is_causal=True))


def test_callable_activation():
    ref = torch.nn.TransformerEncoderLayer(D_MODEL, NHEAD, FF, activation=TF.silu)
    ours = A.TransformerEncoderLayer(D_MODEL, NHEAD, FF, activation=dg.nn.functional.silu)
    ref, ours = ref.double().eval(), load_from_torch(ours.double().eval(), ref)
    check(ref, ours, [randn(SRC, BATCH, D_MODEL, seed=1)], lambda m, x: m(x))
    with pytest.raises(RuntimeError, match="relu/gelu"):
        A.TransformerEncoderLayer(D_MODEL, NHEAD, activation="tanh")


def _stack(kind, norm, cfg):
    """torch's and our stack of two layers of ``kind`` ("Encoder"/"Decoder"), with a final
    LayerNorm when ``norm``."""
    args, kwargs = _layer_args(cfg)
    pair = []
    for lib in (torch.nn, A):
        layer = getattr(lib, f"Transformer{kind}Layer")(*args, **kwargs)
        final = torch.nn.LayerNorm(D_MODEL) if lib is torch.nn else LayerNorm(D_MODEL)
        pair.append(getattr(lib, f"Transformer{kind}")(layer, 2, norm=final if norm else None))
    ref, ours = pair
    ref = ref.double().eval()
    return ref, load_from_torch(ours.double().eval(), ref)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("norm,cfg", [(True, {}), (False, dict(norm_first=True,
                                                               batch_first=True))])
def test_stacks_match_torch(norm, cfg):
    bf = cfg.get("batch_first", False)
    ref, ours = _stack("Encoder", norm, cfg)
    assert repr(ours) == repr(ref)
    # bool: torch recognises a causal float mask and drops it, so it would get no gradient
    mask = np.triu(np.ones((SRC, SRC), dtype=bool), 1)
    check(ref, ours, [_seq(SRC, bf, D_MODEL, seed=1), mask], lambda m, x, mask: m(x, mask))
    ref, ours = _stack("Decoder", norm, cfg)
    assert repr(ours) == repr(ref)
    check(ref, ours, [_seq(TGT, bf, D_MODEL, seed=1), _seq(SRC, bf, D_MODEL, seed=2)],
          lambda m, t, mem: m(t, mem))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_transformer_matches_torch():
    kwargs = dict(d_model=D_MODEL, nhead=NHEAD, num_encoder_layers=2, num_decoder_layers=1,
                  dim_feedforward=FF, batch_first=True)
    ref, ours = _pair("Transformer", **kwargs)
    assert repr(ours) == repr(ref)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(TGT, dtype=torch.float64)
    ours_mask = A.Transformer.generate_square_subsequent_mask(TGT, dtype=dg.float64)
    np.testing.assert_array_equal(ours_mask.numpy(), tgt_mask.numpy())
    padding = _bool((BATCH, SRC), seed=2)
    padding[:, 0] = False
    check(ref, ours, [randn(BATCH, SRC, D_MODEL, seed=1), randn(BATCH, TGT, D_MODEL, seed=3),
                      np.isinf(tgt_mask.numpy()), padding],
          lambda m, s, t, tm, sp: m(s, t, tgt_mask=tm, src_key_padding_mask=sp,
                                    memory_key_padding_mask=sp))
    ours = A.Transformer(**kwargs)
    for name, p in ours.named_parameters():
        if p.ndim > 1:   # xavier_uniform_ everywhere
            fan_out, fan_in = p.shape
            assert np.abs(p.detach().numpy()).max() <= math.sqrt(6 / (fan_in + fan_out)), name
    with pytest.raises(RuntimeError, match="batch number"):
        ours(dg.randn(BATCH, SRC, D_MODEL), dg.randn(BATCH + 1, TGT, D_MODEL))


def test_layer_reprs_match_torch():
    for name in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
        for kwargs in (dict(), dict(activation=torch.nn.GELU(), layer_norm_eps=1e-6)):
            ref = getattr(torch.nn, name)(D_MODEL, NHEAD, FF, **kwargs)
            if "activation" in kwargs:
                kwargs = dict(kwargs, activation=GELU())
            ours = getattr(A, name)(D_MODEL, NHEAD, FF, **kwargs)
            assert repr(ours) == repr(ref)


def test_compiled_encoder_layer_equals_eager():
    layer = A.TransformerEncoderLayer(D_MODEL, NHEAD, FF, batch_first=True).eval()
    x = dg.randn(BATCH, SRC, D_MODEL)
    mask = A.Transformer.generate_square_subsequent_mask(SRC)
    compiled = dg.compile(layer)(x, src_mask=mask)
    np.testing.assert_allclose(compiled.detach().numpy(),
                               layer(x, src_mask=mask).detach().numpy(), rtol=1e-5, atol=1e-6)
