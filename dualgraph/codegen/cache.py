"""Generated kernel modules as files in the kernel cache (``kernels/cache.py``).

A kernel's module is a file, named by a hash of its source and of the kernels package it
calls into, so its loops have a source file (tracebacks and ``inspect`` show the generated
code) and a stable identity: their machine code is cached by ``kernels/native.py`` under a
key that includes the file's content. An edited helper or template gives a new file rather
than stale code.
"""
from __future__ import annotations

import hashlib
import sys

from .._helpers import write_atomic
from ..kernels.cache import (GENERATED, cache_dir, import_file, kernels_hash, mark_used,
                             prune_at_exit)


def load_module(source: str):
    """Import ``source`` as a module backed by a file in the cache (written once)."""
    key = hashlib.sha256((kernels_hash() + source).encode()).hexdigest()[:24]
    name = f"{GENERATED}{key}"
    if name in sys.modules:
        return sys.modules[name]
    path = cache_dir() / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        write_atomic(path, source.encode(), durable=False)
        prune_at_exit(cache_dir())
    else:
        mark_used(path)
    return import_file(name, path)
