"""Where compiled kernels are kept between processes, and what their code depends on.

The directory is ``$DUALGRAPH_CACHE_DIR`` or ``~/.cache/dualgraph/kernels``; when it cannot
be written, a temporary directory is used (compiled code then lasts for this process only).
Every file there is written atomically (a temporary file, then a rename), so a process never
reads half a file another one is writing.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def cache_dir() -> Path:
    root = os.environ.get("DUALGRAPH_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "dualgraph", "kernels")
    return writable(Path(root)) or Path(tempfile.mkdtemp(prefix="dualgraph-kernels-"))


@lru_cache(maxsize=None)
def writable(folder: Path) -> Path | None:
    """``folder`` (made if need be) when this process can write files there, else None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError:
        return None
    return folder


@lru_cache(maxsize=None)
def kernels_hash() -> str:
    """A hash of this package's source files: the loops, the scalar helpers they inline and
    the code that compiles them. Machine code compiled from an older version of any of
    them is never reused."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


