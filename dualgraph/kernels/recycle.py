"""Big result arrays of eager ops, recycled once nothing holds them.

An eager training step makes megabyte results (activations, their gradients) and drops
them at the end of the step; the next step makes the same shapes again. glibc's allocator,
left at its defaults (``import dualgraph`` never changes it: ``tuning.py``), returns such
blocks to the system and the next step page-faults fresh zeroed pages back in: about
4 KiB a fault, a few microseconds each, tens of milliseconds a step. A compiled step keeps
its intermediates in planned buffers (``codegen/buffers.py``); this is the same idea for
eager code, where no plan exists: :class:`Recycler` keeps the big arrays eager ops return
and hands one back, as ``out=``, to the next op that wants a result of the same shape and
dtype, once nothing else references it.

"Nothing else references it" is read from the array's reference count: the recycler's own
list holds one reference, and every Tensor, view (through ``.base``), saved autograd value,
NumPy or ctypes export of the array holds another. An array whose count is the recycler's
alone is unreachable from any code, so overwriting it can change no value anyone sees.
Which ops take ``out=`` is the ops' own declaration (``OpDef.fills_out``, ``writes_out``);
``dispatch.apply`` asks :meth:`Recycler.take` before such a call and :meth:`keep` after any
call whose result is big. Memory kept while free is capped (:data:`CAP_BYTES`), the
arrays of one shape at :data:`PER_SHAPE`, and :meth:`release` drops every free one.
"""
from __future__ import annotations

import sys

import numpy as np

MIN_BYTES = 256 << 10    # smaller blocks come from malloc's own bins: no page faults
CAP_BYTES = 512 << 20    # arrays tracked at most (free ones are dropped first past it)
PER_SHAPE = 8            # arrays tracked per (shape, dtype)
SWEEP_EVERY = 64         # over the cap, free arrays of every shape looked for this seldom


def _baseline() -> int:
    """The reference count of an array held only by a recycler's list, as ``take`` and
    ``_drop_free`` read it (the list, the loop's name, getrefcount's argument)."""
    blocks = [np.empty(1)]
    for a in blocks:
        return sys.getrefcount(a)


class Recycler:
    """Arrays of at least :data:`MIN_BYTES` that eager ops returned, by shape and dtype."""

    def __init__(self):
        self.blocks: dict[tuple, list[np.ndarray]] = {}
        self.held = 0        # bytes of the arrays tracked (in use or free)
        self.reused = 0      # arrays handed back (a count, for tests and reports)
        self._over_cap = 0   # keeps that found the cap reached
        self._free = _baseline()

    def take(self, shape: tuple, dtype) -> np.ndarray | None:
        """A tracked C-contiguous array of ``shape`` and ``dtype`` that nothing but the
        recycler references, or None."""
        blocks = self.blocks.get((shape, dtype))
        if blocks:
            for a in blocks:
                if sys.getrefcount(a) == self._free:
                    self.reused += 1
                    return a
        return None

    def tracks(self, array: np.ndarray) -> bool:
        """Whether ``array`` is one of the arrays kept here (so its list references it)."""
        return any(a is array for a in self.blocks.get((array.shape, array.dtype), ()))

    def keep(self, array: np.ndarray) -> None:
        """Track ``array`` (a new result of an eager op) for later calls."""
        if (array.base is not None or array.nbytes < MIN_BYTES
                or not array.flags.c_contiguous or not array.flags.writeable):
            return
        key = (array.shape, array.dtype)
        blocks = self.blocks.get(key, ())
        if any(a is array for a in blocks):
            return
        if len(blocks) >= PER_SHAPE:
            self._drop_free(key)
        elif self.held + array.nbytes > CAP_BYTES:
            # every shape's free arrays are looked for at the first call over the cap and
            # then once in SWEEP_EVERY, not at each: a program holding CAP_BYTES of live
            # results would otherwise scan them all at every big op
            self._over_cap += 1
            if self._over_cap % SWEEP_EVERY == 1:
                self._drop_free(None)
        blocks = self.blocks.get(key, ())
        if len(blocks) >= PER_SHAPE or self.held + array.nbytes > CAP_BYTES:
            return
        self.blocks.setdefault(key, []).append(array)
        self.held += array.nbytes

    def release(self) -> int:
        """Drop every free array (their memory goes back to the allocator); the bytes
        dropped."""
        before = self.held
        self._drop_free(None)
        return before - self.held

    def _drop_free(self, key: tuple | None) -> None:
        """Forget the free arrays of shape-and-dtype ``key``, or of every shape."""
        for k in ([key] if key is not None else list(self.blocks)):
            kept = []
            for a in self.blocks.get(k, ()):
                if sys.getrefcount(a) == self._free:
                    self.held -= a.nbytes
                else:
                    kept.append(a)
            if kept:
                self.blocks[k] = kept
            else:
                self.blocks.pop(k, None)


current: Recycler | None = None   # the process's recycler, where the tuning switch has it on
