"""Saves killed at any point: the path then loads as the old or the new artefact, exactly,
and the next save removes whatever the killed one left behind.

A forked child saves one of several versions after another to the same path and is
SIGKILLed after a random delay; the parent then loads the path and compares it with every
version. CI kills a few dozen saves in a few seconds; a longer run::

    DG_CRASH_KILLS=2000 DG_CRASH_MB=64 PYTHONPATH=$PWD python -m pytest -p no:benchmark \\
        tests/test_crash_consistency.py

A second test stops the child (``os._exit``, which runs no cleanup either) right before or
after each rename of a graph save, so that every step of the protocol is hit every time.
"""
import collections
import functools
import os
import random
import signal
import time

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.graph import Graph, GraphFormatError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

KILLS = int(os.environ.get("DG_CRASH_KILLS", "12"))
SIZE = int(float(os.environ.get("DG_CRASH_MB", "2")) * 2 ** 20) // 4   # float32 per version


@functools.lru_cache(maxsize=None)   # built before the fork, so children only save them
def _graph(k: int) -> Graph:
    """Version ``k``: a different structure (1 to 3 nodes) and constants (filled with k)."""
    g = Graph()
    x = g.add_input((SIZE,), "float32", name="x")
    w = g.add_constant(np.full(SIZE, k, np.float32), name="w")
    for _ in range(1 + k % 3):
        (x,) = g.add_node("add", [x, w])
    g.set_outputs([x])
    return g


def _graph_version(path) -> int:
    g = dg.graph.load(path)
    (w,) = g.constants.values()
    k = int(w[0])
    assert str(g) == str(_graph(k)) and np.array_equal(w, np.full(SIZE, k, np.float32))
    return k


@functools.lru_cache(maxsize=None)
def _state(k: int) -> dict:
    return {"w": dg.full((SIZE,), float(k)), "step": k, "name": f"v{k}"}


def _state_version(path) -> int:
    obj = dg.load(path)
    k = obj["step"]
    assert obj["name"] == f"v{k}" and np.array_equal(obj["w"].numpy(), _state(k)["w"].numpy())
    return k


def _in_child(work) -> int:
    """Fork a child that runs ``work()`` and then exits (status 0, or 1 if ``work``
    raised); returns its pid."""
    pid = os.fork()
    if pid == 0:   # the child: never return into pytest
        status = 1
        try:
            work()
            status = 0
        finally:
            os._exit(status)
    return pid


def _wait(pid: int):
    """How the child ended: "killed" (by SIGKILL) or its exit status (1: ``work`` raised)."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    return os.WEXITSTATUS(status)


CASES = {"graph": (lambda k, p: _graph(k).save(p), _graph_version, "g.json"),
         "state": (lambda k, p: dg.save(_state(k), p), _state_version, "s.dg")}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_random_kills_leave_the_old_or_the_new_artefact(tmp_path, kind):
    save, version, name = CASES[kind]
    path = str(tmp_path / name)
    for k in range(7):
        save(k, path)   # (and builds every version before the children are forked)
    # how long a save takes here, so that kills land all over it
    start = time.perf_counter()
    save(1, path)
    seconds = time.perf_counter() - start
    rng = random.Random(KILLS)
    seen, leftovers = set(), collections.Counter()
    for i in range(KILLS):
        before = version(path)

        def work(first=before + 1):
            for k in range(first, first + 1000):
                save(k % 7, path)

        pid = _in_child(work)
        time.sleep(rng.uniform(0, 3 * seconds))
        os.kill(pid, signal.SIGKILL)
        assert _wait(pid) == "killed"   # mid-way through its saves
        seen.add(version(path))   # loads, and is exactly one of the versions
        leftovers.update("temp file" if name.endswith(".tmp") else "pending constants"
                         for name in os.listdir(tmp_path) if name not in (
                             "g.json", "g.safetensors", "s.dg"))
    save(0, path)
    files = sorted(os.listdir(tmp_path))
    assert files == (["g.json", "g.safetensors"] if kind == "graph" else ["s.dg"])
    print(f"{kind}: {KILLS} kills, versions loaded afterwards {sorted(seen)}, "
          f"leftovers that the next saves removed: {dict(leftovers)}")


STOPPED = 7


@pytest.mark.parametrize("stop", ["before 1", "after 1", "after 2", "after 3"])
def test_a_graph_save_stopped_at_each_rename(tmp_path, stop):
    """The renames of a graph save: 1 the new constants under their pending name, 2 the
    graph file (the commit), 3 the constants to their usual name."""
    path = str(tmp_path / "g.json")
    _graph(1).save(path)
    when, step = stop.split()

    def work():
        real_replace, calls = os.replace, []

        def replace(src, dst):
            calls.append(dst)
            if when == "before" and len(calls) == int(step):
                os._exit(STOPPED)
            real_replace(src, dst)
            if len(calls) == int(step):
                os._exit(STOPPED)

        os.replace = replace
        _graph(2).save(path)

    assert _wait(_in_child(work)) == STOPPED   # (not 0: the save did reach the step)
    expected = 2 if stop in ("after 2", "after 3") else 1
    assert _graph_version(path) == expected
    _graph(3).save(path)
    assert sorted(os.listdir(tmp_path)) == ["g.json", "g.safetensors"]
    assert _graph_version(path) == 3


def test_a_constants_file_from_another_save_is_refused(tmp_path):
    """The pairing check still holds: constants copied from another save do not load."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _graph(1).save(a)
    _graph(2).save(b)
    os.replace(tmp_path / "b.safetensors", tmp_path / "a.safetensors")
    with pytest.raises(GraphFormatError, match="a.safetensors: does not match its graph"):
        dg.graph.load(a)


def test_the_next_save_removes_what_killed_saves_left(tmp_path):
    """Temp files of dead writers (and of versions that put no pid in the name) and pending
    constants are removed; a temp file of a process still running is kept (it may be
    mid-write)."""
    dead = _in_child(lambda: None)
    assert _wait(dead) == 0
    live = []
    for name in ("g.json", "g.safetensors", "g.safetensors.0123456789abcdef", "s.dg"):
        (tmp_path / f".{name}.{dead}.k2j4x9.tmp").write_bytes(b"half")
        (tmp_path / f".{name}.k2j4x9.tmp").write_bytes(b"half")
        live.append(f".{name}.{os.getpid()}.k2j4x9.tmp")
        (tmp_path / live[-1]).write_bytes(b"being written")
    (tmp_path / "g.safetensors.0123456789abcdef").write_bytes(b"pending")
    (tmp_path / "other.safetensors.tmp").write_bytes(b"not ours")
    _graph(1).save(tmp_path / "g.json")
    dg.save(_state(1), tmp_path / "s.dg")
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["g.json", "g.safetensors", "s.dg", "other.safetensors.tmp"] + live)
