"""Attention and Transformers: ``MultiheadAttention``, the Transformer encoder/decoder layers
and stacks, and ``Transformer``, mirroring torch. The functional core,
``scaled_dot_product_attention`` and ``multi_head_attention_forward``, is in
nn/functional_core.py (torch.nn.functional, as torch's is; this module builds on it).

Everything is a composite of registry ops (matmul, softmax, where, linear, layer_norm), so it
differentiates, traces and exports without special support. One function,
``functional_core._attend``, computes attention for both ``scaled_dot_product_attention`` and
``MultiheadAttention``; the two differ only as torch's do: SDPA's softmax gives zeros for a
query whose keys are all masked out, MHA's returned weights give NaN there.

Masks follow torch, and the two conventions differ: for ``scaled_dot_product_attention`` a
bool ``attn_mask`` is True where a key **takes part**; for ``MultiheadAttention`` and the
Transformer layers a bool ``attn_mask`` / ``key_padding_mask`` is True where a key is
**masked out**. Float masks are added to the scores in both (use ``-inf`` to mask).

Parameter names, shapes, order, initialisation and printed forms are torch's, so a torch
state dict loads directly. The ``is_causal`` flags are hints, as in torch: a given mask is
always honoured (the Transformer stacks do not inspect mask values to detect causality,
which would need concrete values and break tracing; the result is the same).

>>> import dualgraph as dg
>>> mha = MultiheadAttention(16, 4, batch_first=True)
>>> x = dg.randn(2, 5, 16)
>>> out, weights = mha(x, x, x)
>>> tuple(out.shape), tuple(weights.shape)
((2, 5, 16), (2, 5, 5))
"""
from __future__ import annotations

import copy
import math

from ..ops import creation, elementwise
from ..ops import shape as shape_ops
from ..ops.index import triu
from . import functional as F
# (both importable from here too, as they were before they moved to functional.py)
from .functional import multi_head_attention_forward, scaled_dot_product_attention  # noqa: F401
from . import init
from .containers import ModuleList
from .encoder_fastpath import nested_fast_path, why_not_nested, zero_padded
from .layers import Dropout, LayerNorm, Linear
from .layers._util import check_device, new_parameter, optional_parameter
from .module import Module

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerDecoder", "Transformer"]


class NonDynamicallyQuantizableLinear(Linear):
    """A :class:`Linear`; torch names MHA's output projection so (for its quantization
    tooling), and the name shows in the printed model."""


class MultiheadAttention(Module):
    """Multi-head attention (Vaswani et al., 2017) with torch's parameters and semantics.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(attn_output, attn_weights)``.
    Inputs are (L, B, E) ((B, L, E) with ``batch_first``) or unbatched (L, E). Bool masks
    are True where a key is masked out; ``key_padding_mask`` is (B, S); ``attn_mask`` is
    (L, S) or (B * num_heads, L, S).

    >>> import dualgraph as dg
    >>> mha = MultiheadAttention(8, 2)
    >>> q, kv = dg.randn(3, 2, 8), dg.randn(5, 2, 8)
    >>> out, w = mha(q, kv, kv, average_attn_weights=False)
    >>> tuple(out.shape), tuple(w.shape)
    ((3, 2, 8), (2, 2, 3, 5))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")

        # one packed projection when q, k and v have the same size, else three
        packed = self._qkv_same_embed_dim
        optional_parameter(self, "in_proj_weight", (3 * embed_dim, embed_dim), packed, device,
                           dtype)
        for name, size in (("q", embed_dim), ("k", self.kdim), ("v", self.vdim)):
            optional_parameter(self, f"{name}_proj_weight", (embed_dim, size), not packed,
                               device, dtype)
        optional_parameter(self, "in_proj_bias", (3 * embed_dim,), bias, device, dtype)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k = new_parameter((1, 1, embed_dim), device, dtype)
            self.bias_v = new_parameter((1, 1, embed_dim), device, dtype)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        """torch's init: Xavier-uniform projections, zero biases, Xavier-normal bias_k/v."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = query.ndim == 3
        if self.batch_first and batched:
            query, key, value = F._map_same(lambda t: shape_ops.transpose(t, 0, 1), query, key,
                                            value)
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
            is_causal=is_causal)
        if self.batch_first and batched:
            out = shape_ops.transpose(out, 0, 1)
        return out, weights


# -- Transformer layers ------------------------------------------------------------------------
def _activation(activation):
    """A callable from torch's activation argument ("relu", "gelu" or a callable)."""
    if callable(activation):
        return activation
    if activation == "relu":
        return elementwise.relu
    if activation == "gelu":
        return elementwise.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: the feed-forward block and its norms.
    Submodules are registered in torch's order by the subclasses."""

    def _feed_forward_modules(self, d_model, dim_feedforward, dropout, bias, dtype):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)

    def _ff_block(self, x, dropout):
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _attention_block(self, attn, dropout, x, mem, attn_mask, key_padding_mask, is_causal):
        x = attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                 need_weights=False, is_causal=is_causal)[0]
        return dropout(x)

    def _residuals(self, x, blocks):
        """Apply ``(norm, block)`` pairs as residual branches: pre-norm (``norm_first``:
        x + block(norm(x))) or post-norm (norm(x + block(x)))."""
        for norm, block in blocks:
            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))
        return x


def _norms_and_dropouts(layer, count, d_model, layer_norm_eps, dropout, bias, dtype):
    """norm1..normN, then dropout1..dropoutN, registered in torch's order."""
    for i in range(1, count + 1):
        setattr(layer, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                             dtype=dtype))
    for i in range(1, count + 1):
        setattr(layer, f"dropout{i}", Dropout(dropout))


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward network, each a residual branch with LayerNorm
    (after the residual by default, before the branch with ``norm_first=True``).

    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``.

    >>> import dualgraph as dg
    >>> layer = TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32)
    >>> tuple(layer(dg.randn(5, 2, 16)).shape)
    (5, 2, 16)
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation=elementwise.relu, layer_norm_eps=1e-5, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, device=device,
                                            dtype=dtype)
        self._feed_forward_modules(d_model, dim_feedforward, dropout, bias, dtype)
        self.norm_first = norm_first
        _norms_and_dropouts(self, 2, d_model, layer_norm_eps, dropout, bias, dtype)
        self.activation = _activation(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        def self_attention(x):
            return self._attention_block(self.self_attn, self.dropout1, x, x, src_mask,
                                         src_key_padding_mask, is_causal)
        def feed_forward(x):
            return self._ff_block(x, self.dropout2)
        return self._residuals(src, [(self.norm1, self_attention), (self.norm2, feed_forward)])


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention over the encoder's output (``memory``), then a
    feed-forward network; each a residual branch with LayerNorm as in
    :class:`TransformerEncoderLayer`.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``.

    >>> import dualgraph as dg
    >>> layer = TransformerDecoderLayer(d_model=16, nhead=4, dim_feedforward=32)
    >>> tuple(layer(dg.randn(3, 2, 16), dg.randn(5, 2, 16)).shape)
    (3, 2, 16)
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation=elementwise.relu, layer_norm_eps=1e-5, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        for name in ("self_attn", "multihead_attn"):
            setattr(self, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first, device=device,
                                                   dtype=dtype))
        self._feed_forward_modules(d_model, dim_feedforward, dropout, bias, dtype)
        self.norm_first = norm_first
        _norms_and_dropouts(self, 3, d_model, layer_norm_eps, dropout, bias, dtype)
        self.activation = _activation(activation)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        def self_attention(x):
            return self._attention_block(self.self_attn, self.dropout1, x, x, tgt_mask,
                                         tgt_key_padding_mask, tgt_is_causal)

        def cross_attention(x):
            return self._attention_block(self.multihead_attn, self.dropout2, x, memory,
                                         memory_mask, memory_key_padding_mask,
                                         memory_is_causal)

        def feed_forward(x):
            return self._ff_block(x, self.dropout3)
        return self._residuals(tgt, [(self.norm1, self_attention),
                                     (self.norm2, cross_attention), (self.norm3, feed_forward)])


# -- stacks ------------------------------------------------------------------------------------
def _clones(layer, n: int) -> ModuleList:
    """``n`` independent deep copies of ``layer`` (torch's ``_get_clones``)."""
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` applied in turn, then ``norm`` if given.

    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=None)``. There are no
    nested tensors here, but where torch's would run (``enable_nested_tensor``, inference,
    a padding mask: nn/encoder_fastpath.py) the padded positions come out zero as torch's.

    >>> import dualgraph as dg
    >>> enc = TransformerEncoder(TransformerEncoderLayer(16, 4, 32), num_layers=2)
    >>> tuple(enc(dg.randn(5, 2, 16)).shape)
    (5, 2, 16)
    """

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = (enable_nested_tensor and isinstance(
            encoder_layer, TransformerEncoderLayer) and not why_not_nested(encoder_layer))
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                           is_causal=bool(is_causal))
        if nested_fast_path(self, src, mask, src_key_padding_mask):
            output = zero_padded(output, src_key_padding_mask, self.mask_check)
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` applied in turn (each attending to
    ``memory``), then ``norm`` if given.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)``.
    """

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        output = tgt
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask,
                           tgt_is_causal=bool(tgt_is_causal),
                           memory_is_causal=memory_is_causal)
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    """The encoder-decoder Transformer of "Attention Is All You Need", as torch's
    ``nn.Transformer``: ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False)``.

    >>> import dualgraph as dg
    >>> model = Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
    ...                     dim_feedforward=32)
    >>> mask = Transformer.generate_square_subsequent_mask(3)
    >>> tuple(model(dg.randn(5, 2, 16), dg.randn(3, 2, 16), tgt_mask=mask).shape)
    (3, 2, 16)
    """

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=elementwise.relu,
                 custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        layer_args = dict(dim_feedforward=dim_feedforward, dropout=dropout,
                          activation=activation, layer_norm_eps=layer_norm_eps,
                          batch_first=batch_first, norm_first=norm_first, bias=bias,
                          device=device, dtype=dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(d_model, nhead, **layer_args), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(d_model, nhead, **layer_args), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def _reset_parameters(self):
        """torch's init: Xavier-uniform for every matrix, the rest as the layers left it."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The float (sz, sz) causal mask: 0 on and below the diagonal, -inf above, so
        position i attends to positions <= i.

        >>> Transformer.generate_square_subsequent_mask(2).tolist()
        [[0.0, -inf], [0.0, 0.0]]
        """
        check_device(device)
        return triu(creation.full((sz, sz), -math.inf, dtype=dtype), 1)
