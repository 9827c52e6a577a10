"""The eight- and sixteen-lane intrinsics of ``kernels/simd.py`` against NumPy at odd offsets and
lengths, the machine code they become (``ymm`` FMA and max on an AVX2 CPU), and the same
loops compiled for a generic x86-64 CPU (SSE only), where LLVM splits the vectors; the
sixteen-lane (wide) ones beside eight-lane ones in one loop, ``zmm`` FMA on AVX-512."""
import os
import subprocess
import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from dualgraph.kernels import build, helper, loop  # noqa: E402
from dualgraph.kernels.simd import (add, broadcast, broadcast_at,  # noqa: E402
                                    broadcast_at_like, broadcast_at_wide, broadcast_wide,
                                    even_lanes, fma, high_half, joined, lanes_of, load,
                                    load_even, load_inside, load_like, load_wide, low_half,
                                    maximum, maximum_nan, minimum, multiply, odd_lanes,
                                    store, store_first, subtract, transpose, tree_sum,
                                    where_greater, zip_high, zip_low)


@loop
def _arithmetic(a, x, y, z, out, at):
    """Each intrinsic's result at ``out[k * 8 + at:]``, from ``x``, ``y``, ``z`` at odd
    offsets."""
    s = broadcast(a)
    u, v, w = load(x, 3), load(y, 5), load(z, 1)
    store(out, at, fma(u, v, w))
    store(out, 8 + at, add(u, s))
    store(out, 16 + at, subtract(u, v))
    store(out, 24 + at, multiply(u, v))
    store(out, 32 + at, maximum(u, v))
    store(out, 40 + at, minimum(u, v))
    store(out, 48 + at, where_greater(u, v, w, s))
    store(out, 56 + at, load_even(x, 1))
    store(out, 64 + at, maximum_nan(u, w))
    store(out, 72 + at, broadcast_at(x, 18))


@loop
def _fma_max(a, x, y, out):
    """``out = max(a * x + y, 0)`` eight at a time (the remainder untouched)."""
    s, zero = broadcast(a), broadcast(np.float32(0))
    for i in range(0, out.size - 7, 8):
        store(out, i, maximum(fma(s, load(x, i), load(y, i)), zero))


@loop
def _inside(x, first, size, out):
    """``load_inside`` of eight and of sixteen lanes of ``x`` from element ``first`` (its
    lanes inside ``0:size``; -1 elsewhere) into ``out[:8]`` and ``out[8:]``."""
    store(out, 0, load_inside(x, first, first, size, broadcast(np.float32(-1))))
    store(out, 8, load_inside(x, first, first, size, broadcast_wide(np.float32(-1))))


@loop
def _first(x, count, out):
    """``store_first`` of ``count`` lanes of eight and of sixteen of ``x``'s first."""
    store_first(out, 0, count, load(x, 0))
    store_first(out, 8 + count, count, load_wide(x, 0))


@loop
def _transpose(x, at, stride, out, out_at, out_stride):
    transpose(x, at, stride, out, out_at, out_stride)


def test_intrinsics_match_numpy():
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for n in (19, 13, 9))
    x[4], z[3] = np.nan, np.nan     # (maximum_nan keeps both; the others as NumPy's ops)
    out = np.full(83, np.nan, np.float32)
    _arithmetic(np.float32(0.5), x, y, z, out, 3)
    u, v, w = x[3:11], y[5:13], z[1:9]
    want = [u * v + w, u + np.float32(0.5), u - v, u * v, np.where(u > v, u, v),
            np.where(u < v, u, v), np.where(u > v, w, np.float32(0.5)), x[1:17:2],
            np.maximum(u, w), np.full(8, x[18])]
    for k, expected in enumerate(want):
        np.testing.assert_allclose(out[3 + 8 * k:11 + 8 * k], expected, rtol=1e-6, atol=1e-6)
    assert np.isnan(out[:3]).all()    # (nothing written outside the eight lanes)


@loop
def _wide(a, x, y, out, at):
    """Sixteen-lane FMA, add, broadcasts and store at ``out[at:]`` and ``out[16 + at:]``,
    an eight-lane FMA after them (both kinds of vector in one loop)."""
    u, v = load_wide(x, 3), load_wide(y, 1)
    store(out, at, fma(u, v, broadcast_wide(a)))
    store(out, 16 + at, add(broadcast_at_wide(x, 20), v))
    store(out, 32 + at, fma(load(x, 3), load(y, 1), broadcast(a)))


def test_wide_intrinsics_match_numpy():
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal(n).astype(np.float32) for n in (21, 17))
    out = np.full(43, np.nan, np.float32)
    _wide(np.float32(0.25), x, y, out, 3)
    np.testing.assert_allclose(out[3:19], x[3:19] * y[1:17] + np.float32(0.25), rtol=1e-6)
    np.testing.assert_array_equal(out[19:35], x[20] + y[1:17])
    np.testing.assert_allclose(out[35:43], x[3:11] * y[1:9] + np.float32(0.25), rtol=1e-6)
    assert np.isnan(out[:3]).all()


@loop
def _wide_halves(x, y, out):
    """The sixteen-lane intrinsics: ``fma`` and ``add`` of ``load_wide``,
    ``broadcast_at_wide`` and ``joined`` vectors, stored by halves."""
    u, v = load_wide(x, 3), broadcast_at_wide(y, 2)
    w = joined(load(y, 1), load(x, 0))
    r = add(fma(u, v, w), u)
    store(out, 1, low_half(r))
    store(out, 9, high_half(r))


def test_sixteen_lane_intrinsics_match_numpy():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(19).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    out = np.full(18, np.nan, np.float32)
    _wide_halves(x, y, out)
    want = x[3:19] * y[2] + np.concatenate([y[1:9], x[0:8]]) + x[3:19]
    np.testing.assert_allclose(out[1:17], want, rtol=1e-6, atol=1e-6)
    assert np.isnan(out[[0, 17]]).all()


@helper(inline="always")
def _shuffled(x, out, zero, n):
    a, b = load_like(x, 1, zero), load_like(x, 1 + n, zero)
    store(out, 0, even_lanes(a, b))
    store(out, n, odd_lanes(a, b))
    store(out, 2 * n, zip_low(a, b))
    store(out, 3 * n, zip_high(a, b))


@loop
def _shuffles(x, out, wide):
    """``even_lanes``, ``odd_lanes``, ``zip_low`` and ``zip_high`` of two vectors loaded
    by ``load_like`` (sixteen lanes where ``wide``, else eight), stored one after another."""
    if wide:
        _shuffled(x, out, broadcast_wide(np.float32(0)), 16)
    else:
        _shuffled(x, out, broadcast(np.float32(0)), 8)


@pytest.mark.parametrize("n", [8, 16])
def test_deinterleave_and_zip_match_numpy(n):
    x = np.arange(2 * n + 1, dtype=np.float32)
    out = np.full(4 * n, np.nan, np.float32)
    _shuffles(x, out, n == 16)
    a, b = x[1:1 + n], x[1 + n:1 + 2 * n]
    both = np.concatenate([a, b])
    np.testing.assert_array_equal(out[:n], both[0::2])
    np.testing.assert_array_equal(out[n:2 * n], both[1::2])
    zipped = np.stack([a, b], axis=1).reshape(-1)
    np.testing.assert_array_equal(out[2 * n:], zipped)


@loop
def _like(x, out, lanes):
    """``load_like`` and ``broadcast_at_like`` at the widths of an eight- and a sixteen-lane
    zero, their sums stored one after the other; ``lanes`` their ``lanes_of``."""
    narrow, wide = broadcast(np.float32(0)), broadcast_wide(np.float32(0))
    store(out, 0, fma(load_like(x, 1, narrow), broadcast_at_like(x, 20, narrow), narrow))
    store(out, 8, fma(load_like(x, 2, wide), broadcast_at_like(x, 21, wide), wide))
    lanes[0], lanes[1] = lanes_of(narrow), lanes_of(wide)


def test_intrinsics_like_a_vector_take_its_width():
    x = np.arange(23, dtype=np.float32) - np.float32(7.5)
    out = np.full(25, np.nan, np.float32)
    lanes = np.zeros(2, np.int64)
    _like(x, out, lanes)
    np.testing.assert_array_equal(out[:8], x[1:9] * x[20])
    np.testing.assert_array_equal(out[8:24], x[2:18] * x[21])
    assert np.isnan(out[24]) and lanes.tolist() == [8, 16]


@loop
def _tree_sum(x, at, out):
    out[0] = tree_sum(load(x, at))


def test_tree_sum_is_numpys_pairwise_order():
    """``tree_sum`` joins the lanes as NumPy's pairwise sum joins its eight running sums
    (values chosen so that another order rounds differently)."""
    x = np.array([1e8, 1, -1e8, 1, 3, 1e-3, -3, 7, 5], np.float32)
    out = np.zeros(1, np.float32)
    for at in (0, 1):
        v = x[at:at + 8]
        _tree_sum(x, at, out)
        assert out[0] == ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
    _tree_sum(x, 0, out)
    assert out[0] != np.float32(sum(float(a) for a in x[:8]))


@pytest.mark.parametrize("n", [8, 13, 64, 1003])
def test_loop_over_odd_lengths(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal((2, n)).astype(np.float32)
    out = np.full(n, -1, np.float32)
    _fma_max(np.float32(1.5), x, y, out)
    full = n - n % 8
    np.testing.assert_allclose(out[:full], np.maximum(1.5 * x[:full] + y[:full], 0), rtol=1e-6,
                               atol=1e-6)
    assert (out[full:] == -1).all()


@pytest.mark.parametrize("at, stride, out_at, out_stride", [(0, 8, 0, 8), (3, 11, 5, 9),
                                                             (1, 17, 0, 8)])
def test_transpose_matches_numpy(at, stride, out_at, out_stride):
    x = np.arange(200, dtype=np.float32)
    out = np.full(200, -1, np.float32)
    _transpose(x, at, stride, out, out_at, out_stride)
    want = np.full(200, -1, np.float32)
    for i in range(8):
        want[out_at + np.arange(8) * out_stride + i] = x[at + i * stride + np.arange(8)]
    np.testing.assert_array_equal(out, want)


def _flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split())
    return set()


@pytest.mark.skipif(not sys.platform.startswith("linux") or not {"avx2", "fma"} <= _flags(),
                    reason="needs an x86 CPU with AVX2 and FMA")
def test_machine_code_is_ymm_fma_and_max():
    x = np.ones(16, np.float32)
    out = np.empty(16, np.float32)
    # compiled here, not through the disk cache: Numba inspects only what it compiled
    dispatcher = numba.njit(build.numba_function(_fma_max.fn), error_model="numpy")
    dispatcher(np.float32(1), x, x, out)
    asm = "\n".join(dispatcher.inspect_asm().values())
    assert any("vfmadd" in line and "ymm" in line for line in asm.splitlines())
    assert any("vmaxps" in line and "ymm" in line for line in asm.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux") or "avx512f" not in _flags(),
                    reason="needs an x86 CPU with AVX-512F")
def test_wide_machine_code_is_zmm_fma():
    x, out = np.ones(40, np.float32), np.empty(43, np.float32)
    dispatcher = numba.njit(build.numba_function(_wide.fn), error_model="numpy")
    dispatcher(np.float32(1), x, x, out, 0)
    asm = "\n".join(dispatcher.inspect_asm().values())
    assert any("vfmadd" in line and "zmm" in line for line in asm.splitlines())


GENERIC = """
import numba
import numpy as np
from test_simd import _fma_max, _transpose, test_intrinsics_match_numpy
from dualgraph.kernels import build
test_intrinsics_match_numpy()
x = np.linspace(-2, 2, 40, dtype=np.float32)
out = np.zeros(40, np.float32)
fn = numba.njit(build.numba_function(_fma_max.fn), error_model="numpy")   # not from a cache
fn(np.float32(2), x, x[::-1].copy(), out)
assert np.allclose(out, np.maximum(2 * x + x[::-1], 0), atol=1e-6), out
t = np.zeros(64, np.float32)
build.dispatcher(_transpose)(np.arange(64, dtype=np.float32), 0, 8, t, 0, 8)
assert (t == np.arange(64, dtype=np.float32).reshape(8, 8).T.ravel()).all()
asm = "\\n".join(fn.inspect_asm().values())
assert "ymm" not in asm and "fmaf" not in asm and "mulps" in asm, asm
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or "sse2" not in _flags(),
                    reason="needs an x86-64 CPU")
def test_generic_x86_64_compiles_and_is_correct(tmp_path):
    """With Numba's target CPU forced to a baseline x86-64 (SSE2, no AVX nor FMA) the same
    loops compile to ``xmm`` multiplies and adds (no ``fmaf`` calls) and are correct, every
    intrinsic among them."""
    env = dict(os.environ, NUMBA_CPU_NAME="x86-64", NUMBA_CPU_FEATURES="+sse,+sse2,+cx8,+fxsr,"
               "+mmx,+cmov", NUMBA_CACHE_DIR=str(tmp_path), DUALGRAPH_NATIVE="0",
               DUALGRAPH_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__),
                                           os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", GENERIC], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("first,size", [(0, 40), (-5, 40), (30, 40), (-20, 3), (35, 37),
                                        (2, 2)])
def test_load_inside_reads_only_the_lanes_inside(first, size):
    """Lanes outside ``0:size`` take the fill, whatever lies there (the array's start
    before, another array's data after: the masked load touches none of it)."""
    x = np.arange(40, dtype=np.float32)
    out = np.zeros(24, np.float32)
    _inside(x[:size], first, size, out)
    for lanes, got in ((8, out[:8]), (16, out[8:])):
        k = first + np.arange(lanes)
        np.testing.assert_array_equal(got, np.where((k >= 0) & (k < size), k, -1))


@pytest.mark.parametrize("count", [0, 1, 5, 8])
def test_store_first_writes_only_its_lanes(count):
    """The lanes from ``count`` on stay as they were (the end of the array among them:
    the masked store writes nothing there)."""
    x = np.arange(1, 17, dtype=np.float32)
    out = np.zeros(8 + 2 * count, np.float32)
    _first(x, count, out)
    want = np.zeros_like(out)
    want[:count], want[8 + count:] = x[:count], x[:count]
    np.testing.assert_array_equal(out, want)

