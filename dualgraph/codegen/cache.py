"""The on-disk kernel cache: generated kernel modules as files, so Numba's own cache
(``cache=True``, which needs a source file) keeps their machine code between processes.

A kernel's file is named by a hash of its source and of ``fastmath.py`` and
``normalization.py`` (the helpers it inlines), so an edited helper or template gives a new
file rather than stale code. The directory is ``$DUALGRAPH_CACHE_DIR`` or
``~/.cache/dualgraph/kernels``; when it cannot be written, a temporary directory is used
(compiled code then lasts for this process only).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from ..kernels import fastmath


@lru_cache(maxsize=None)
def cache_dir() -> Path:
    root = os.environ.get("DUALGRAPH_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "dualgraph", "kernels")
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="dualgraph-kernels-"))
    return path


@lru_cache(maxsize=None)
def _helpers_hash() -> str:
    """A hash of the helper modules kernels import and inline (an edit there must not
    reuse machine code compiled from the old version)."""
    digest = hashlib.sha256()
    here = Path(fastmath.__file__)
    for path in (here, here.with_name("normalization.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def load_module(source: str):
    """Import ``source`` as a module backed by a file in the cache (written once)."""
    key = hashlib.sha256((_helpers_hash() + source).encode()).hexdigest()[:24]
    name = f"dualgraph_kernel_{key}"
    if name in sys.modules:
        return sys.modules[name]
    path = cache_dir() / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)   # atomic: another process never sees half a file
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
