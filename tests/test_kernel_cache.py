"""The kernel caches' housekeeping (``kernels/cache.py``): entries a process loads are marked
used; a process that wrote an entry prunes the folder once, by age, then by size, least
recently used first, an entry's files together."""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dualgraph.codegen import cache as module_cache
from dualgraph.kernels import cache, native

DAY = 86400


def entry(folder: Path, key: str, age_days: float, size: int = 10) -> list[Path]:
    key = hashlib.sha256(key.encode()).hexdigest()[:32]   # (entries are named by hashes)
    """A native-style entry (``key.json`` + ``key.o``) last used ``age_days`` ago."""
    files = [folder / f"{key}.json", folder / f"{key}.o"]
    for f in files:
        f.write_bytes(b"x" * size)
        stamp = time.time() - age_days * DAY
        os.utime(f, (stamp, stamp))
    return files


def test_entries_unused_for_a_month_are_removed_with_all_their_files(tmp_path):
    old = entry(tmp_path, "old", cache.MAX_AGE_DAYS + 1)
    recent = entry(tmp_path, "recent", cache.MAX_AGE_DAYS - 1)
    module = tmp_path / f"dualgraph_kernel_{'ab' * 12}.py"
    module.write_text("x = 1\n")
    compiled = Path(importlib.util.cache_from_source(module))
    compiled.parent.mkdir()
    compiled.write_bytes(b"pyc")
    for f in (module, compiled):
        os.utime(f, (time.time() - 40 * DAY,) * 2)
    others = [tmp_path / f".{module.name}.123.tmp", tmp_path / "notes.txt", tmp_path / "abc.json"]
    for f in others:     # another writer's temporary file; files that are not entries
        f.write_text("")
        os.utime(f, (time.time() - 400 * DAY,) * 2)
    removed = cache.prune(tmp_path)
    assert sorted(removed) == sorted(old + [module, compiled])
    assert all(f.exists() for f in recent + others)


def test_beyond_the_size_budget_the_least_recently_used_go_first(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "MAX_BYTES", 50)
    entries = {key: entry(tmp_path, key, age, size=20)   # 40 bytes an entry
               for key, age in (("a", 3), ("b", 1), ("c", 2))}
    removed = cache.prune(tmp_path)
    assert sorted(removed) == sorted(entries["c"] + entries["a"])   # b, the newest, fits
    assert all(f.exists() for f in entries["b"])


def test_loading_an_entry_marks_it_used(tmp_path):
    code = b"\x00object code"
    meta = {"sha256": hashlib.sha256(code).hexdigest(), "symbol": "s"}
    key = "ab" * 16
    meta_path, object_path = native._paths(tmp_path, key)
    object_path.write_bytes(code)
    meta_path.write_text(json.dumps(meta))
    os.utime(meta_path, (time.time() - 40 * DAY,) * 2)
    assert native._load(tmp_path, key) == (meta, code)
    assert time.time() - meta_path.stat().st_mtime < DAY
    assert cache.prune(tmp_path) == []      # (the month-old entry it was would have gone)


def test_a_kernel_module_is_marked_used_when_loaded_and_its_writer_prunes_at_exit(
        tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_to_prune", {Path("/registered-already")})   # (no atexit)
    monkeypatch.setattr(module_cache, "cache_dir", lambda: tmp_path)
    stale = entry(tmp_path, "stale", cache.MAX_AGE_DAYS + 5)
    source = "VALUE = 42\n"
    module = module_cache.load_module(source)     # written: the tmp_path is pruned at exit
    assert module.VALUE == 42 and tmp_path in cache._to_prune
    assert all(f.exists() for f in stale)
    cache._to_prune.discard(Path("/registered-already"))
    assert sorted(cache.prune_written()) == sorted(stale)
    path = Path(module.__file__)
    os.utime(path, (time.time() - 40 * DAY,) * 2)
    del __import__("sys").modules[module.__name__]
    module_cache.load_module(source)              # loaded again: used now
    assert time.time() - path.stat().st_mtime < DAY


def test_a_process_that_wrote_an_entry_prunes_the_folder_when_it_exits(tmp_path):
    stale = entry(tmp_path, "stale", cache.MAX_AGE_DAYS + 5)
    code = ("from dualgraph.codegen.cache import load_module\n"
            "assert load_module('VALUE = 7\\n').VALUE == 7\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, DUALGRAPH_CACHE_DIR=str(tmp_path)), timeout=120)
    assert done.returncode == 0, done.stderr
    assert not any(f.exists() for f in stale)
    assert list(tmp_path.glob("dualgraph_kernel_*.py"))       # the new entry stays
