"""Loops as cached machine code (``kernels/native.py``): the entry Numba compiles computes
what Numba's own dispatcher computes (to the bit, but for row sums a loop may reassociate);
a second process runs it without
importing Numba; arguments with no native form, a damaged cache file and
``DUALGRAPH_NATIVE=0`` fall back to the dispatcher."""
import ctypes
import os
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dualgraph import kernels
from dualgraph.kernels import activations, native, normalization, optim, pooling, scatter

pytestmark = pytest.mark.skipif(not (kernels.numba_available() and native.enabled()),
                                reason="Numba or llvmlite is not installed")


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=300)


def test_signature_codes_name_dtype_and_rank_or_none_without_a_native_form():
    m = np.ones((2, 3), np.float32)
    assert native.signature((m, m[0], np.ones(3, np.int64), np.ones(2, bool))) == (
        "f4[2]", "f4[1]", "i8[1]", "b1[1]")
    assert native.signature((1.5, np.float32(1), 2, np.int32(2), True, np.bool_(0))) == (
        "f8", "f4", "i8", "i4", "b", "b")
    no_form = (m[:, ::2], m.T, np.ones((2, 2), ">f4"), np.ones(()), np.ones(2, np.float16),
               "text", None)
    assert native.signature(no_form) == (None,) * len(no_form)


def test_signature_of_an_equal_dtype_that_is_another_object():
    """signature() looks built-in dtypes up by identity first; an unpickled array's dtype
    (equal, another object) still gets its code, a byte-swapped one still gets none."""
    m = pickle.loads(pickle.dumps(np.ones((2, 2), np.int64)))
    f = np.ones(3, np.dtype("f4", metadata={"unit": "m"}))
    assert native.signature((m, f, np.ones(2, np.dtype(">i8")))) == ("i8[2]", "f4[1]", None)


def loop_cases():
    """(loop, arguments, the indices of the outputs) covering 1-, 2- and 3-D arrays,
    int64 and float32 arrays, float32, float and bool scalars."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 96)).astype(np.float32)
    w, b = rng.normal(size=96).astype(np.float32), rng.normal(size=96).astype(np.float32)
    p, g, m = (rng.normal(size=5000).astype(np.float32) for _ in range(3))
    v = np.abs(rng.normal(size=5000)).astype(np.float32)
    adam_scalars = tuple(np.float32(s) for s in (0.1, 0.999, 0.001, 0.9, 1e-8, -1e-3, 1.0))
    return [
        (normalization.layer_norm, (0, 64, x, w, b, np.float32(1e-5), np.empty_like(x),
                                    np.empty(64, np.float32), np.empty(64, np.float32)),
         (6, 7, 8)),
        (activations.lstm_cell, (*(rng.normal(size=(8, 128)).astype(np.float32)
                                   for _ in range(2)),
                                 rng.normal(size=128).astype(np.float32),
                                 rng.normal(size=(8, 32)).astype(np.float32),
                                 *(np.empty((8, 32), np.float32) for _ in range(2)),
                                 np.empty((8, 128), np.float32)), (4, 5, 6)),
        (optim.adam_in_place, (p.copy(), g, m.copy(), v.copy(), *adam_scalars), (0, 2, 3)),
        (optim.sgd_momentum_in_place, (p.copy(), g, m.copy(), np.float32(0.9),
                                       np.float32(1.0), np.float32(-0.01), True), (0, 2)),
        (scatter.add_rows, (np.zeros((10, 96), np.float32), rng.integers(0, 10, 64),
                            x), (0,)),
        (pooling.max_pool_2x2, (rng.normal(size=(3, 8, 8)).astype(np.float32),
                                np.empty((3, 4, 4), np.float32),
                                np.empty((3, 4, 4), np.int64)), (1, 2)),
    ]


@pytest.mark.parametrize("case", range(6))
def test_a_native_entry_computes_what_numbas_dispatcher_computes(case):
    from dualgraph.kernels import build
    loop, args, outputs = loop_cases()[case]
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    loop(*args)
    assert isinstance(loop._compiled[native.signature(args)], ctypes._CFuncPtr)
    build.dispatcher(loop)(*copies)
    for i in outputs:
        if loop.fastmath:   # reassociated row sums: each compile may group them its own way
            np.testing.assert_allclose(args[i], copies[i], rtol=2e-6, atol=2e-6)
        else:
            np.testing.assert_array_equal(args[i], copies[i])


def test_arguments_without_a_native_form_run_numbas_dispatcher():
    rng = np.random.default_rng(1)
    g, y = rng.normal(size=(2, 8192)).astype(np.float32)
    out = np.empty(4096, np.float32)
    activations.relu_backward(g[::2], y[::2], out)     # strided views
    np.testing.assert_array_equal(out, np.where(y[::2] > 0, g[::2], 0))
    fn = activations.relu_backward._compiled[native.signature((g[::2], y[::2], out))]
    assert not isinstance(fn, ctypes._CFuncPtr)


SCRIPT = """
    import sys
    import numpy as np
    from dualgraph.codegen.cache import load_module
    source = ("from dualgraph.kernels import loop\\n"
              "@loop\\n"
              "def twice(x, out):\\n"
              "    for i in range(x.size):\\n"
              "        out[i] = x[i] * 2\\n")
    x = np.arange(5000, dtype=np.float32)
    out = np.empty_like(x)
    load_module(source).twice(x, out)
    from dualgraph.kernels.native import activity
    print(bool((out == 2 * x).all()), "numba" in sys.modules, activity.compiled,
          activity.loaded)
"""
COMPILED, LOADED = ["True", "False", "1", "0"], ["True", "False", "0", "1"]


def test_a_second_process_runs_the_stored_entry_without_numba(tmp_path):
    """The first process has the compile worker compile the entry (Numba is never imported
    here), the second loads what it stored; compiled in-process, the same."""
    runs = [run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path)) for _ in range(2)]
    assert [r.stdout.split() for r in runs] == [COMPILED, LOADED], runs
    assert len(list((tmp_path / "native").glob("*.o"))) == 1
    here = run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path / "here"),
                      DUALGRAPH_COMPILE_WORKER="0")
    assert here.stdout.split() == ["True", "True", "1", "0"], here.stderr
    assert run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path / "here")).stdout.split() == (
        LOADED)


def test_a_damaged_object_is_compiled_again(tmp_path):
    run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path))
    (obj,) = (tmp_path / "native").glob("*.o")
    obj.write_bytes(obj.read_bytes()[:100])
    again = run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path))
    assert again.stdout.split() == COMPILED, again.stderr
    assert run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path)).stdout.split() == LOADED


def test_native_switched_off_runs_numbas_dispatcher(tmp_path):
    out = run_python(SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path), DUALGRAPH_NATIVE="0")
    assert out.stdout.split() == ["True", "True", "0", "0"], out.stderr
    assert not (tmp_path / "native").exists()


def test_the_unreachable_error_path_aborts_with_a_message():
    code = """
        import ctypes
        from dualgraph.kernels import native
        ctypes.CFUNCTYPE(None)(native._error_path_address())()
    """
    out = run_python(code)
    assert out.returncode != 0
    assert "reached Numba's exception path" in out.stderr and "DUALGRAPH_NATIVE=0" in out.stderr


def uncached_loop(name: str, expr: str):
    """A generated loop ``name(x, out)`` computing ``out[i] = expr`` whose source is in no
    cache (it names this process and a fresh object), so calling it compiles."""
    from dualgraph.codegen.cache import load_module
    source = ("from dualgraph.kernels import loop\n"
              "@loop\n"
              f"def {name}(x, out):   # {os.getpid()} {id(object())} {time.time()}\n"
              "    for i in range(x.size):\n"
              f"        out[i] = {expr}\n")
    return getattr(load_module(source), name)


def test_a_numba_without_the_internals_used_warns_and_runs_the_dispatcher(monkeypatch):
    from dualgraph.kernels import build
    monkeypatch.setenv("DUALGRAPH_COMPILE_WORKER", "0")    # (the patch is in this process)

    def no_internals(*args):
        raise AttributeError("'CFunc' object has no attribute '_library'")
    monkeypatch.setattr(build, "entry", no_internals)
    plus_one = uncached_loop("plus_one", "x[i] + 1")
    x = np.arange(10, dtype=np.float32)
    out = np.empty_like(x)
    with pytest.warns(UserWarning, match="no native entry.*_library.*dispatcher"):
        plus_one(x, out)
    np.testing.assert_array_equal(out, x + 1)
    assert not isinstance(plus_one._compiled[native.signature((x, out))], ctypes._CFuncPtr)


def test_a_numba_that_does_not_import_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DUALGRAPH_COMPILE_WORKER", "0")    # (the patch is in this process)
    monkeypatch.setitem(sys.modules, "dualgraph.kernels.build", None)   # import fails
    monkeypatch.delattr(kernels, "build", raising=False)
    minus_one = uncached_loop("minus_one", "x[i] - 1")
    x = np.arange(10, dtype=np.float32)
    with pytest.raises(native.NumbaBroken, match="minus_one.*does not import.*"
                       "DUALGRAPH_NUMBA=0"):
        minus_one(x, np.empty_like(x))


def test_numbas_cache_of_a_loop_is_stale_once_any_kernel_file_changes(monkeypatch):
    """Numba judges a cached function by its own file; a loop's code also holds the helpers
    of other files, so build's locators add the hash of every kernel file to the stamp."""
    from dualgraph.kernels import build
    halve = uncached_loop("halve", "x[i] * 0.5")
    x = np.arange(10, dtype=np.float32)

    def calls():
        dispatcher = build._cached_njit(build.numba_function(halve.fn), error_model="numpy")
        out = np.empty_like(x)
        dispatcher(x, out)
        np.testing.assert_array_equal(out, x * 0.5)
        return sum(dispatcher.stats.cache_hits.values()), sum(
            dispatcher.stats.cache_misses.values())
    assert calls() == (0, 1)          # compiled and saved
    assert calls() == (1, 0)          # loaded from Numba's cache
    monkeypatch.setattr(build, "kernels_hash", lambda: "a helper changed")
    assert calls() == (0, 1)          # compiled again


JOB_SCRIPT = """
    import numpy as np
    from dualgraph.codegen.cache import load_module
    source = ("from dualgraph.kernels import loop\\n"
              "@loop\\n"
              "def twice(x, out):\\n"
              "    for i in range(x.size):\\n"
              "        out[i] = x[i] * 2\\n")
    x = np.arange(64, dtype=np.float32)
    print(load_module(source).twice.job_address(x, np.empty_like(x)) is not None)
"""


def test_a_job_entry_compiled_in_this_process_links(tmp_path):
    """A job entry (one int64 argument, run by OpenBLAS's threads) compiled in the process
    links at once, as one loaded from the cache does (its signature came back a tuple from
    the compile, a list from the stored JSON: the job test once saw only the list)."""
    for worker in ("0", "0", "1"):   # compiled here, then loaded; then from a worker's cache
        run = run_python(JOB_SCRIPT, DUALGRAPH_CACHE_DIR=str(tmp_path / worker),
                         DUALGRAPH_COMPILE_WORKER=worker)
        assert run.stdout.split() == ["True"] and "no native entry" not in run.stderr, run


ENTRY_OBJECT = """
import copy, hashlib, sys
from dualgraph.kernels import build, conv_blocked
from numba.core import inline_closurecall
assert inline_closurecall.copy is not copy   # (build.py's, installed at its import)
if sys.argv[1] == "numba's own":   # the inliner as Numba ships it
    worker = inline_closurecall.InlineWorker
    worker.inline_ir = worker.inline_ir.__wrapped__
    inline_closurecall.copy = copy
code, _, _ = build.entry(conv_blocked._relayout, ("i8", "i8", "f4[1]", "f4[1]", "i8", "b"), "e")
print(hashlib.sha256(code).hexdigest())
"""


def test_the_inliners_scope_copies_leave_the_machine_code_as_it_was():
    """build.py has Numba's inliner copy a callee's scope once per inline, not once per
    block (``_copy_scopes_once``: 4/5 of the largest loops' compile time): the entry
    of a loop with a nested inlined helper is the same object either way (two processes
    with one hash seed: Numba's symbol names count the functions a process compiled)."""
    runs = [subprocess.run([sys.executable, "-c", ENTRY_OBJECT, inliner],
                           env=dict(os.environ, PYTHONHASHSEED="0"), capture_output=True,
                           text=True, timeout=300) for inliner in ("shim", "numba's own")]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    assert runs[0].stdout == runs[1].stdout


KEPT_SOURCE = """
from dualgraph.kernels import loop
@loop
def affine(start, stop, x, out, scale, shift, k, flip, neg):
    for i in range(start, stop):
        v = x[i] * scale + shift + k + neg
        out[i] = -v if flip else v
"""


@pytest.mark.parametrize("native_on", [True, False])
def test_a_kept_call_with_fixed_arguments_writes_each_calls_arrays(monkeypatch, native_on):
    """``run_kept(..., fixed=...)``: the fixed scalars (float32, float64, int, bool, a
    negative int) are written once into the job entry's block (``threads.Kept``); each
    call's arrays, new objects every time, are the ones read and written. Without native
    entries, the same results through the loop's other entry."""
    from dualgraph.codegen.cache import load_module
    from dualgraph.kernels import threads
    if not native_on:
        monkeypatch.setattr(native, "enabled", lambda: False)
    affine = load_module(textwrap.dedent(KEPT_SOURCE)).affine
    fixed = (np.float32(1.5), -0.25, 3, True, -7)
    entry, rng = [], np.random.default_rng(0)
    for rows in (37, 37, 37):
        x = rng.normal(size=rows).astype(np.float32)
        out = np.full(rows, np.nan, np.float32)
        threads.run_kept(affine, 1, entry, x, out, rows=rows, fixed=fixed)
        want = -(x * np.float32(1.5) + np.float32(-0.25) + np.float32(3) + np.float32(-7))
        np.testing.assert_allclose(out, want, rtol=1e-6)
    assert isinstance(entry[0], threads.Kept) == (native_on and native.enabled())
    # (a scalar among the arrays: the plain entry, the same results)
    other, x = [], rng.normal(size=5).astype(np.float32)
    out = np.empty(5, np.float32)
    threads.run_kept(affine, 1, other, x, out, np.float32(2), rows=5, fixed=fixed[1:])
    assert not isinstance(other[0], threads.Kept)
    np.testing.assert_allclose(out, -(x * 2 - 0.25 + 3 - 7), rtol=1e-6)
