"""``dg.nn.utils.rnn``: ``pad_sequence`` (variable-length sequences to one padded batch),
as ``torch.nn.utils.rnn``. Packed sequences (``pack_padded_sequence``) are not built: the
recurrent layers run over the padded batch, and a program masks the padded steps itself.

>>> import dualgraph as dg
>>> pad_sequence([dg.ones(2), dg.ones(3)], batch_first=True).tolist()
[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
"""
from __future__ import annotations

from ...ops import index, shape

__all__ = ["pad_sequence", "pack_padded_sequence", "pad_packed_sequence",
           "pack_sequence"]


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack tensors of shapes (L_i, *) into (max L, B, *) (or (B, max L, *) with
    ``batch_first``), filling the missing steps with ``padding_value``."""
    sequences = list(sequences)
    if not sequences:
        raise ValueError("pad_sequence: received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got "
                         f"{padding_side!r}")
    longest = max(int(s.shape[0]) for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - int(s.shape[0])
        pair = (missing, 0) if padding_side == "left" else (0, missing)
        padded.append(index.pad(s, (0, 0) * (s.ndim - 1) + pair, value=padding_value))
    return shape.stack(padded, dim=0 if batch_first else 1)


def _packed(name: str):
    def call(*args, **kwargs):
        raise NotImplementedError(
            f"torch.nn.utils.rnn.{name} is not supported: dualgraph has no packed "
            f"sequences. Pad the batch (pad_sequence), run the recurrent layer over it and "
            f"take each sequence's last valid step (or mask the padded steps) yourself")
    call.__name__ = name
    call.__doc__ = f"Raises NotImplementedError: ``{name}`` needs packed sequences."
    return call


pack_padded_sequence = _packed("pack_padded_sequence")
pad_packed_sequence = _packed("pad_packed_sequence")
pack_sequence = _packed("pack_sequence")
