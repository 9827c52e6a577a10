"""``dg.nn.utils.rnn``: variable-length sequences, as ``torch.nn.utils.rnn``:
``pad_sequence`` (to one padded batch) and packed sequences (``pack_padded_sequence``,
``pad_packed_sequence``, ``pack_sequence``), which ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU``
take in place of a padded batch.

A :class:`PackedSequence` holds the valid steps only, time-major: ``data`` is step 0 of
every sequence, then step 1 of those that have one, ... (the sequences sorted by length,
longest first); ``batch_sizes[t]`` is how many sequences have a step ``t``. Packing and
unpacking are one gather each (an ``index_select`` with indices computed from the lengths
in Python), so they differentiate, trace and compile as any op; the lengths are Python
numbers, which ``dg.compile`` guards (a lengths *tensor* is read with ``tolist()``).

>>> import dualgraph as dg
>>> pad_sequence([dg.ones(2), dg.ones(3)], batch_first=True).tolist()
[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
>>> packed = pack_sequence([dg.tensor([1., 2., 3.]), dg.tensor([4., 5.])])
>>> packed.data.tolist(), packed.batch_sizes.tolist()
([1.0, 4.0, 2.0, 5.0, 3.0], [2, 2, 1])
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...ops import creation, index, shape
from ...tensor import Tensor

__all__ = ["pad_sequence", "PackedSequence", "pack_padded_sequence", "pad_packed_sequence",
           "pack_sequence", "unpack_sequence", "unpad_sequence"]


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


def _int64(values) -> Tensor:
    """An int64 tensor of Python numbers, concrete even while tracing: its values are read
    back as Python numbers (the lengths they come from are guarded)."""
    return Tensor._make(np.asarray(values, dtype=np.int64))


class PackedSequence(NamedTuple):
    """Sequences of several lengths without their padding (see the module docstring);
    ``sorted_indices[i]`` is the batch position of the i-th longest sequence,
    ``unsorted_indices`` its inverse (both None when the batch came sorted)."""
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def sizes(self) -> list:
        """``batch_sizes`` as Python ints."""
        return self.batch_sizes.tolist()

    def lengths(self) -> list:
        """Each sequence's length, in the sorted order of ``data``."""
        sizes = self.sizes()
        return [sum(1 for s in sizes if s > b) for b in range(sizes[0])]

    def to(self, *args, **kwargs) -> "PackedSequence":
        return self._replace(data=self.data.to(*args, **kwargs))

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False


def _lengths(lengths, batch: int, steps: int, name: str) -> list:
    """``lengths`` (a list, or a 1-D tensor, read with ``tolist()``) as Python ints,
    checked against the batch and the number of steps."""
    values = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    values = [int(v) for v in values]
    if len(values) != batch:
        raise ValueError(f"{name}: expected {batch} lengths (one per sequence of the batch), "
                         f"got {len(values)}")
    if values and (min(values) <= 0 or max(values) > steps):
        raise ValueError(f"{name}: every length must be between 1 and the padded length "
                         f"{steps}, got {values}")
    return values


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, B, *) (or (B, T, *) with ``batch_first``) of sequences of
    ``lengths``. With ``enforce_sorted`` the lengths must decrease; without, the batch is
    sorted here and the permutation kept in the result."""
    batch_dim, time_dim = (0, 1) if batch_first else (1, 0)
    batch, steps = int(input.shape[batch_dim]), int(input.shape[time_dim])
    values = _lengths(lengths, batch, steps, "pack_padded_sequence")
    if enforce_sorted:
        if any(a < b for a, b in zip(values, values[1:])):
            raise RuntimeError(
                f"pack_padded_sequence: `lengths` array must be sorted in decreasing order "
                f"when `enforce_sorted` is True, got {values}. You can pass "
                f"`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                f"sidestep this requirement if you do not need ONNX exportability.")
        order = list(range(batch))
        sorted_indices = unsorted_indices = None
    else:
        order = sorted(range(batch), key=lambda b: -values[b])   # stable, as torch's sort
        sorted_indices = _int64(order)
        unsorted_indices = _int64(np.argsort(order))
    sizes = [sum(1 for v in values if v > t) for t in range(max(values))]
    # data row k is (t, order[b]) of the padded batch, for each step t and b < sizes[t]
    rows = [t * batch + order[b] if not batch_first else order[b] * steps + t
            for t, size in enumerate(sizes) for b in range(size)]
    flat = shape.flatten(input, 0, 1)
    data = index.index_select(flat, 0, creation.tensor(rows, dtype="int64"))
    return PackedSequence(data, _int64(sizes), sorted_indices, unsorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The padded batch of a :class:`PackedSequence` (in the order the batch had before
    packing) and the lengths (int64), as torch's."""
    data, sizes = sequence.data, sequence.sizes()
    steps, batch = len(sizes), sizes[0]
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"pad_packed_sequence: expected total_length to be at least "
                             f"the length of the longest sequence ({steps}), got "
                             f"{total_length}")
        steps = total_length
    order = (list(range(batch)) if sequence.sorted_indices is None
             else sequence.sorted_indices.tolist())
    # each (t, b) of the padded batch reads its data row, or the padding row after them all
    where = np.full((steps, batch), int(data.shape[0]), dtype=np.int64)
    k = 0
    for t, size in enumerate(sizes):
        for b in range(size):
            where[t, order[b]] = k
            k += 1
    if batch_first:
        where = where.T
    pad_row = creation.full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype)
    rows = index.index_select(shape.cat([data, pad_row], 0), 0,
                              creation.tensor(where.reshape(-1).tolist(), dtype="int64"))
    padded = shape.reshape(rows, where.shape + tuple(data.shape[1:]))
    lengths = np.zeros(batch, dtype=np.int64)
    lengths[order] = sequence.lengths()
    return padded, _int64(lengths)


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of tensors (L_i, *): ``pack_padded_sequence`` of their padded batch."""
    lengths = [int(s.shape[0]) for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences of a padded batch, each cut to its length."""
    batch = padded_sequences if batch_first else shape.transpose(padded_sequences, 0, 1)
    values = _lengths(lengths, int(batch.shape[0]), int(batch.shape[1]), "unpad_sequence")
    return [batch[b, :n] for b, n in enumerate(values)]


def unpack_sequence(packed_sequences):
    """The list of sequences of a :class:`PackedSequence`, in the batch's order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
