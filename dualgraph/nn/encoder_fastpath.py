"""What ``nn.TransformerEncoder``'s nested-tensor fast path changes in torch's results.

In inference (eval mode, and no gradient to record), torch runs a ``TransformerEncoder``
given a ``src_key_padding_mask`` on a nested tensor of the unpadded sequences and pads
the result back with zeros: the output at padded positions is 0 (then the final
``norm``'s bias, where there is one), not what the layers compute there. Programs that
pool over every position, or a decoder attending to the memory without its padding mask,
see those zeros. dualgraph computes every position as a padded tensor and zeroes the
same positions under the same conditions (:func:`nested_fast_path` and
:func:`zero_padded`), so that its results are torch's.
"""
from __future__ import annotations

from ..autograd.tape import is_grad_enabled
from ..dispatch import autocast, mha_fastpath
from ..ops import elementwise as ew

_RELU_OR_GELU = ("relu", "gelu", "ReLU", "GELU")


def why_not_nested(layer) -> str:
    """Why torch's ``TransformerEncoder.__init__`` turns its nested tensors off for
    copies of the ``TransformerEncoderLayer`` ``layer`` ("" where it keeps them on)."""
    attn = layer.self_attn
    activation = getattr(layer.activation, "__name__", type(layer.activation).__name__)
    reasons = [(layer.norm_first, "norm_first was True"),
               (not attn.batch_first, "self_attn.batch_first was not True"),
               (not attn._qkv_same_embed_dim, "self_attn._qkv_same_embed_dim was not True"),
               (attn.in_proj_bias is None, "self_attn was passed bias=False"),
               (activation not in _RELU_OR_GELU, "activation_relu_or_gelu was not True"),
               (layer.norm1.eps != layer.norm2.eps, "norm1.eps is not equal to norm2.eps"),
               (attn.num_heads % 2 == 1, "self_attn.num_heads is odd")]
    return next((f"encoder_layer.{why}" for bad, why in reasons if bad), "")


def nested_fast_path(encoder, src, mask, src_key_padding_mask) -> bool:
    """Whether torch's ``TransformerEncoder.forward`` would take its nested-tensor path
    (leaving aside the padding's alignment, which :func:`zero_padded` checks in the
    tensors)."""
    first = encoder.layers[0]
    if (not mha_fastpath[0] or not getattr(encoder, "use_nested_tensor", False)
            or first.training or src.dim() != 3 or src_key_padding_mask is None
            or mask is not None or autocast.dtype is not None):
        return False
    return not (is_grad_enabled() and (src.requires_grad or any(
        p.requires_grad for p in first.parameters())))


def zero_padded(output, src_key_padding_mask, mask_check: bool):
    """``output`` (batch, sequence, features) with the padded positions zero, as torch's
    nested tensor padded back; with ``mask_check``, only where every row's padding is at
    its end (torch takes the nested path only then). A float mask pads where non-zero."""
    padded = src_key_padding_mask
    padded = padded if padded.dtype.is_floating_point is False else ew.ne(padded, 0.0)
    if mask_check and padded.shape[-1] > 1:
        # (padding only at the end: each row, read left to right, never goes back to False)
        suffix = ew.ge(padded[:, 1:].int(), padded[:, :-1].int()).all()
        padded = ew.logical_and(padded, suffix)
    return output.masked_fill(padded.unsqueeze(-1), 0.0)
