"""Keep freed array memory in the process instead of handing it back to the OS each step.

Eager training allocates and frees the same MB-sized activations and gradients every
step. With glibc's default malloc settings a block above the mmap threshold is mapped
fresh at each allocation and unmapped at each free, and memory freed at the top of the
heap is trimmed away, so every step page-faults its whole working set in again: measured
on W3 (gpt_train), a third of the step went to the kernel zeroing pages. Raising the two
thresholds once keeps those blocks in malloc's free lists, where the next step finds them
(the effect of the caching allocators other frameworks ship, without one of our own).

It is a process-wide setting (it affects every library in the process) and it can keep
up to ``TRIM_THRESHOLD`` bytes of freed memory resident, so it is explicit and reversible:
nothing happens off glibc, or when the user set glibc's own ``MALLOC_*`` variables, or
when ``DUALGRAPH_TUNE_MALLOC=0``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20    # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 256 << 20   # freed memory kept before the heap is trimmed

OPT_OUT = "DUALGRAPH_TUNE_MALLOC"
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def tune_malloc(environ=os.environ) -> bool:
    """Raise glibc's mmap and trim thresholds; True if they were set (see module docstring)."""
    if environ.get(OPT_OUT, "1") == "0" or any(k in environ for k in _USER_SETTINGS):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


MALLOC_TUNED = tune_malloc()
