"""Where compiled kernels are kept between processes, what their code depends on, and how
old entries leave.

The directory is ``$DUALGRAPH_CACHE_DIR`` or ``~/.cache/dualgraph/kernels``; when it cannot
be written, a temporary directory is used (compiled code then lasts for this process only).
Every file there is written atomically (a temporary file, then a rename), so a process never
reads half a file another one is writing.

An entry is keyed by everything its code depends on, so a new version of this package (or a
graph no longer run) leaves entries nothing will read again. Each process marks the entries
it loads as used (their files' modification time), and a process that has written a new
entry (it compiled something, which is rare) prunes that folder once, when it exits (a
scan of a few thousand files takes ~0.1 s, which a first call should not wait for):
entries unused for ``MAX_AGE_DAYS``, then the least recently used while the folder holds
more than ``MAX_BYTES``. An entry pruned while another process needs it is compiled again
there.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

MAX_AGE_DAYS = 30
MAX_BYTES = 512 << 20
GENERATED = "dualgraph_kernel_"   # how the names of generated kernel modules begin
# The files an entry is made of (machine code and its description, a kernel module): a
# cache directory set to a folder holding other files loses none of them.
ENTRY_FILE = re.compile(rf"[0-9a-f]{{16,64}}\.(json|o)|{GENERATED}[0-9a-f]{{16,64}}\.py")
_to_prune: set[Path] = set()   # folders this process wrote entries into


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


def import_file(name: str, path) -> object:
    """Import the module file ``path`` as module ``name`` (a generated kernel module: code
    generation writes it, the compile worker imports it again from the same file)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def mark_used(path: Path) -> None:
    """Record that the entry whose main file is ``path`` was just used (see above)."""
    try:
        os.utime(path)
    except OSError:   # (a read-only installation: its entries simply age)
        pass


def prune_at_exit(folder: Path) -> None:
    """Have :func:`prune` run on ``folder`` when this process exits (an entry was just
    written there)."""
    if not _to_prune:
        atexit.register(prune_written)
    _to_prune.add(folder)


def prune_written() -> list[Path]:
    """:func:`prune` every folder this process wrote entries into; what was removed."""
    removed = []
    for folder in sorted(_to_prune):
        removed += prune(folder)
    return removed


def prune(folder: Path, now: float | None = None) -> list[Path]:
    """Remove the entries of ``folder`` unused for ``MAX_AGE_DAYS``, then the least
    recently used beyond ``MAX_BYTES``; returns what was removed. An entry is the files
    sharing a name before the suffix (``<key>.json`` and ``<key>.o``), with a module's
    compiled ``.pyc``; its age is its newest file's. Only files named as entries are
    touched (``ENTRY_FILE``)."""
    entries: dict[str, list[Path]] = {}
    for path in folder.glob("*.*"):
        if ENTRY_FILE.fullmatch(path.name) and path.is_file():
            entries.setdefault(path.name.split(".")[0], []).append(path)
    stats = []
    for files in entries.values():
        files += [Path(importlib.util.cache_from_source(p)) for p in files if p.suffix == ".py"]
        found = [st for st in map(_stat, files) if st is not None]
        if found:
            stats.append((max(st.st_mtime for st in found), sum(st.st_size for st in found),
                          files))
    stats.sort(key=lambda e: e[0], reverse=True)     # most recently used first
    now = time.time() if now is None else now
    removed, total = [], 0
    for used, size, files in stats:
        total += size
        if now - used > MAX_AGE_DAYS * 86400 or total > MAX_BYTES:
            for f in files:
                try:
                    f.unlink()
                    removed.append(f)
                except OSError:   # (gone already, or not ours to remove)
                    pass
    return removed


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None
