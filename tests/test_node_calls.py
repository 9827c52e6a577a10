"""What a node's line calls in the generated code at small shapes, and that it computes
eager's bits: products of two matrices call NumPy's ``matmul`` (``matmul_blas``),
comparisons their ufunc, a small ``where`` NumPy's ``where`` (``np_where``), and a fused
group that runs with NumPy calls its generated function without the kernel's wrapper.
Outputs handed to the caller are never buffers that the next call writes."""
import numpy as np
import pytest

import dualgraph as dg
from dualgraph.codegen import Executable
from dualgraph.graph import Graph


def _run_both(fn, *arrays):
    """``fn`` compiled (two calls: the second runs the cached code) and eager, as NumPy."""
    compiled = dg.compile(fn)
    tensors = [dg.tensor(a) for a in arrays]
    compiled(*tensors)
    got = compiled(*tensors)
    want = fn(*tensors)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    return compiled.code, [g.numpy() for g in got], [w.numpy() for w in want]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_products_comparisons_and_selections_call_numpy_with_eagers_bits(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(dtype)
    w = rng.standard_normal((5, 4)).astype(dtype)

    def fn(x, w):
        m = x @ w
        keep = dg.where(m > 0, m, -0.5)          # a float array and a Python number
        both = dg.where(m <= 1, m, keep)         # two arrays
        return both, m >= 0, m < 1, m == keep

    code, got, want = _run_both(fn, x, w)
    for name in ("matmul_blas(x, w)", "greater(", "greater_equal(", "less(", "equal("):
        assert name in code, code
    for g, e in zip(got, want, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_where_outside_its_small_form_keeps_the_kernel():
    """Past the loop's size, with a non-boolean condition or mixed dtypes, the registry
    kernel runs (with its promotion), and still agrees with eager."""
    g = Graph()
    c = g.add_input((100, 100), "bool", name="c")
    a = g.add_input((100, 100), "float32", name="a")
    b = g.add_input((100, 100), "float64", name="b")
    small = g.add_input((3,), "float32", name="small")
    (big,) = g.add_node("where", [c, a, 0.5])
    (mixed,) = g.add_node("where", [c, a, b])
    (sel,) = g.add_node("where", [True, small, 1.0])
    g.set_outputs([big, mixed, sel])
    exe = Executable(g)
    assert "np_where" not in exe.code and exe.code.count("k_where(") == 3, exe.code
    rng = np.random.default_rng(1)
    arrays = [rng.random((100, 100)) < 0.5, rng.standard_normal((100, 100)).astype(np.float32),
              rng.standard_normal((100, 100)), np.ones(3, np.float32)]
    for got, want in zip(exe.run(arrays), exe.interpret(arrays), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_integer_products_and_comparisons_of_numbers_but_float32_64_keep_the_kernel():
    g = Graph()
    i = g.add_input((3, 3), "int64", name="i")
    h = g.add_input((3,), "float16", name="h")
    (p,) = g.add_node("matmul", [i, i])
    (gt,) = g.add_node("gt", [p, 2])
    (lt,) = g.add_node("lt", [h, 3e4])
    g.set_outputs([p, gt, lt])
    exe = Executable(g)
    for call in ("k_matmul(i, i)", "k_gt(matmul, 2)", "k_lt(h, 30000.0)"):
        assert call in exe.code, exe.code
    arrays = [np.arange(9).reshape(3, 3), np.array([1, 6e4, np.inf], np.float16)]
    for got, want in zip(exe.run(arrays), exe.interpret(arrays), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_group_that_runs_with_numpy_is_called_without_the_kernel_wrapper():
    g = Graph()
    x = g.add_input((4, 3), "float32", name="x")
    (y,) = g.add_node("mul", [x, 0.99])
    (z,) = g.add_node("add", [y, x])
    g.set_outputs([z])
    exe = Executable(g, passes=True)
    (kernel,) = exe.kernels.values()
    assert kernel.lowering is None   # (three elements: not worth a loop)
    bound = [v for v in exe.program.globals.values() if v is kernel.fallback.fn]
    assert bound, exe.code
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(exe.run([a])[0], exe.interpret([a])[0])


def test_outputs_kept_from_the_last_call_keep_their_values():
    """Intermediates live in buffers reused by every call; what a call returns (also a view
    of a value computed in one) is never one of them, so the caller's results of one call
    are unchanged by the next."""
    g = Graph()
    x = g.add_input((40, 64), "float32", name="x")
    (e,) = g.add_node("exp", [x])
    (t,) = g.add_node("tanh", [e])
    (m,) = g.add_node("mul", [t, 2.0])
    (s,) = g.add_node("sin", [m])
    (r,) = g.add_node("reshape", [m], {"shape": (64, 40)})
    g.set_outputs([s, r])
    exe = Executable(g)
    assert "bufs[" in exe.code, exe.code
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((40, 64)).astype(np.float32) for _ in range(3)]
    kept = [exe.run([a]) for a in inputs]
    for outs, a in zip(kept, inputs, strict=True):
        for got, want in zip(outs, exe.interpret([a]), strict=True):
            np.testing.assert_array_equal(got, want)
    again = exe.run([inputs[0]])
    assert not any(np.shares_memory(a, b) for a in again for b in kept[0])
