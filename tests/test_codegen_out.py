"""Kernels that fill a planned ``out=`` array (ops ``fills_out``): each op's result, an
intermediate of the graph, is written into the Executable's buffers (the generated line
shows ``out=``, and the array keeps its address from call to call), and the compiled
results equal the reference interpreter's (the op kernels without ``out``) bit for bit,
call after call with new data; a value that reaches an output, or an alias of one, is never
written into a buffer; two threads may call one Executable."""
import inspect
import re
import threading

import numpy as np
import pytest

from dualgraph.codegen import Executable
from dualgraph.graph import Graph
from dualgraph.ops.opdef import REGISTRY

INF = float("inf")
CONV = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
POOL = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
            ceil_mode=False)
LN = dict(n_dims=1, eps=1e-5)
AVG = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True,
           count_include_pad=False, divisor_override=None)


def test_every_fills_out_kernel_takes_out():
    ops = [op for op in REGISTRY.values() if op.fills_out]
    assert len(ops) >= 20
    for op in ops:
        params = inspect.signature(op.kernel).parameters
        assert "out" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()), op


# (name, input shapes and dtypes, the op's inputs as graph inputs or earlier nodes, attrs)
# Each case is a small graph: ``setup`` nodes, then the op; every array output of the op is
# read by ``mul(v, 2)``, whose results are the graph's outputs, so the op's are
# intermediates that get planned buffers.
F32, F64, I64 = "float32", "float64", "int64"
CASES = {
    "matmul_2d": ("matmul", [((5, 7), F32), ((7, 3), F32)], {}),
    "matmul_batch_matrix": ("matmul", [((2, 5, 7), F32), ((7, 3), F32)], {}),
    "matmul_stacks": ("matmul", [((4, 6, 8), F32), ((4, 8, 6), F32)], {}),
    "matmul_broadcast": ("matmul", [((3, 1, 5, 4), F64), ((2, 4, 6), F64)], {}),
    "matmul_vector": ("matmul", [((3, 7), F32), ((7,), F32)], {}),
    "matmul_float16": ("matmul", [((5, 7), "float16"), ((7, 3), "float16")], {}),
    "linear_bias": ("linear", [((5, 7), F32), ((3, 7), F32), ((3,), F32)], {}),
    "linear_3d": ("linear", [((2, 5, 7), F32), ((3, 7), F32)], {}),
    "linear_float64": ("linear", [((5, 7), F64), ((3, 7), F64), ((3,), F64)], {}),
    "linear_row": ("linear", [((1, 64), F32), ((48, 64), F32), ((48,), F32)], {}),
    "linear_relu": ("linear_relu", [((5, 7), F32), ((3, 7), F32), ((3,), F32)], {}),
    "linear_backward": ("linear_backward", [((6, 3), F32), ((6, 5), F32), ((3, 5), F32)],
                        dict(need=(True, True, True))),
    "linear_backward_3d": ("linear_backward",
                           [((2, 6, 3), F32), ((2, 6, 5), F32), ((3, 5), F32)],
                           dict(need=(True, False, True))),
    "linear_epilogue": ("linear_epilogue",
                        [((64, 7), F32), ((80, 7), F32), ((80,), F32), ((64, 80), F32)],
                        dict(act="gelu_tanh", bounds=(-INF, INF), residual_at="after")),
    "softmax_rows": ("softmax", [((2, 5, 9), F32)], dict(dim=2)),
    "softmax_dim0": ("softmax", [((5, 9), F32)], dict(dim=0)),
    "log_softmax": ("log_softmax", [((5, 9), F64)], dict(dim=1)),
    "softmax_backward": ("softmax_backward", [((4, 9), F32), ((4, 9), F32)], dict(dim=1)),
    "layer_norm": ("layer_norm", [((4, 64, 32), F32), ((32,), F32), ((32,), F32)], LN),
    "layer_norm_float64": ("layer_norm", [((5, 8), F64), ((8,), F64), ((8,), F64)], LN),
    "gelu_tanh": ("gelu_tanh", [((8, 700), F32)], {}),
    "gelu": ("gelu", [((8, 700), F32)], {}),
    "gelu_tanh_backward": ("gelu_tanh_backward", [((8, 700), F32), ((8, 700), F32)], {}),
    "gelu_backward_broadcast": ("gelu_backward", [((1, 700), F32), ((8, 700), F32)], {}),
    "relu_backward": ("relu_backward", [((8, 640), F32), ((8, 640), F32)], {}),
    "cat": ("cat", [((2, 3), F32), ((2, 5), F32)], dict(dim=1)),
    "cat_mixed": ("cat", [((2, 3), F32), ((4, 3), F64)], dict(dim=0)),
    "sum": ("sum", [((4, 5, 6), F32)], dict(dims=(0, 2), keepdim=False, dtype=None)),
    "sum_keepdim": ("sum", [((4, 5), F64)], dict(dims=(1,), keepdim=True, dtype=None)),
    "max_pool2d": ("max_pool2d", [((4, 8, 32, 30), F32)], POOL),
    "avg_pool2d_rows": ("avg_pool2d", [((3, 5, 13, 30), F32)], AVG),
    "avg_pool2d_lanes": ("avg_pool2d", [((2, 9, 12, 11), F32)], AVG),
    "avg_pool2d_float64": ("avg_pool2d", [((2, 3, 13, 30), F64)], AVG),
    "max_pool2d_3x3": ("max_pool2d", [((2, 3, 9, 9), F32)],
                       dict(POOL, kernel_size=(3, 3), stride=(2, 2))),
    "batch_norm": ("batch_norm", [((4, 3, 32, 16), F32), ((3,), F32), ((3,), F32)],
                   dict(eps=1e-5)),
    "batch_norm_float64": ("batch_norm", [((4, 3, 5, 4), F64), ((3,), F64), ((3,), F64)],
                           dict(eps=1e-5)),
    "conv2d_epilogue": ("conv2d_epilogue",
                        [((2, 3, 7, 6), F32), ((4, 3, 3, 3), F32), ((4,), F32)],
                        dict(act="relu", bounds=(-INF, INF), residual_at=None, **CONV)),
    "conv2d_epilogue_float64": ("conv2d_epilogue",
                                [((2, 3, 7, 6), F64), ((4, 3, 3, 3), F64), ((4,), F64)],
                                dict(act="none", bounds=(-INF, INF), residual_at=None,
                                     **CONV)),
    "conv2d_input_grad": ("conv2d_input_grad", [((2, 4, 7, 6), F32), ((4, 3, 3, 3), F32)],
                          dict(input_size=(7, 6), **CONV)),
    "conv2d_input_grad_depthwise": ("conv2d_input_grad",
                                    [((2, 4, 7, 6), F32), ((4, 1, 3, 3), F32)],
                                    dict(input_size=(7, 6), **dict(CONV, groups=4))),
    "slice_backward": ("slice_backward", [((4, 3, 6), F32), ((4, 9, 6), F32)],
                       dict(index=(None, (2, 5, 1), None))),
    "conv2d_weight_grad": ("conv2d_weight_grad", [((2, 3, 7, 6), F32), ((2, 4, 7, 6), F32)],
                           dict(kernel_size=(3, 3), **CONV)),
}


def case_graph(name):
    op, specs, attrs = CASES[name]
    g = Graph()
    xs = [g.add_input(shape, dtype, name=f"x{i}") for i, (shape, dtype) in enumerate(specs)]
    outs = g.add_node(op, xs, attrs)
    g.set_outputs([g.add_node("mul", [v, 2.0])[0] for v in outs if v.ndim])
    return g


def random_inputs(graph, rng):
    return [rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs]


def node_addresses(exe, arrays, node):
    """The data addresses of ``node``'s results in a run of ``exe`` on ``arrays``, and the
    run's outputs."""
    seen = []

    def on_node(n, outs):
        if n is node:
            seen.extend(o.__array_interface__["data"][0] for o in outs)
    return seen, exe.run_timed(arrays, on_node)


def first_statement(code: str) -> str:
    """The generated function's first statement after its docstring (broken lines
    joined): the case's op."""
    joined = []
    for line in code.splitlines():
        if line.startswith(" " * 8):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line.strip())
    after = next(i for i, s in enumerate(joined) if i > 1 and s.endswith('"""'))
    return joined[after + 1]


def check_filled(exe, graph, calls, rng, inputs=random_inputs):
    """Compiled == interpreted over ``calls`` calls with new data, earlier results kept
    as returned, and the planned node's results at the same addresses each call."""
    node = graph.nodes[-len(graph.outputs) - 1]   # (the node before the muls)
    kept, addresses = [], []
    for _ in range(calls):
        arrays = inputs(graph, rng)
        seen, got = node_addresses(exe, arrays, node)
        want = exe.interpret(arrays)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        kept.append(([g.copy() for g in got], got))
        addresses.append(seen)
    for copies, got in kept:   # (no later call wrote over an earlier call's results)
        for c, g in zip(copies, got):
            np.testing.assert_array_equal(c, g)
    return node, addresses


# Kernels that return a new array of their own for these (the values are still checked):
# a float16 product is cast afterwards (and its float16 ``mul`` is no ufunc call, which
# reads the product as a kernel that may return it: no buffer at all); NumPy's softmax
# over another dim than the last; the stride-1 input gradient and the weight gradient
# (small); a pool other than 2x2; a cat of mixed dtypes; NumPy's float64 log-softmax,
# LayerNorm and BatchNorm.
OWN_ARRAY = {"matmul_float16", "softmax_dim0", "conv2d_input_grad", "conv2d_weight_grad",
             "max_pool2d_3x3", "cat_mixed", "log_softmax", "layer_norm_float64",
             "batch_norm_float64"}


@pytest.mark.parametrize("name", list(CASES))
def test_each_out_form_writes_its_planned_buffer_and_equals_the_kernel(name):
    graph = case_graph(name)
    exe = Executable(graph)
    node, addresses = check_filled(exe, graph, 3, np.random.default_rng(len(name)))
    if name == "matmul_float16":
        return
    assert re.search(r"out=\(?bufs\[", first_statement(exe.code)), exe.code
    buffers = {b.__array_interface__["data"][0] for bufs in exe._buffers.values()
               for b in bufs}
    if name not in OWN_ARRAY:   # (the first result: an int64 one is read by a kernel)
        assert addresses[0][0] == addresses[1][0] == addresses[2][0]
        assert addresses[0][0] in buffers


@pytest.mark.parametrize("shape", [(3, 5), (1, 32, 112, 112), (2, 40, 57, 29)])
def test_planned_buffers_start_on_a_cache_line(shape):
    """Every planned buffer starts on a 64-byte boundary (``buffers.aligned_empty``), for
    sizes malloc places 16 bytes past one (from 128 kB), in every dtype the plan holds."""
    g = Graph()
    x = g.add_input(shape, F32, name="x")
    (e,) = g.add_node("exp", [x])
    (m,) = g.add_node("mul", [e, 2.0])
    (d,) = g.add_node("cast", [m], {"dtype": F64})
    (s,) = g.add_node("add", [d, 1.0])
    (t,) = g.add_node("tanh", [s])
    g.set_outputs([t])
    exe = Executable(g)
    xs = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for _ in range(2):
        got = exe.run([xs])[0]
        np.testing.assert_allclose(got, np.tanh((np.exp(xs) * 2).astype(np.float64) + 1),
                                   rtol=1e-6)
    bufs = [b for bs in exe._buffers.values() for b in bs]
    assert bufs and all(b.ctypes.data % 64 == 0 for b in bufs)
    assert {b.dtype for b in bufs} == {np.dtype(F32), np.dtype(F64)}


def test_a_value_returned_through_a_view_gets_no_buffer():
    g = Graph()
    x, w = g.add_input((4, 6), F32, name="x"), g.add_input((6, 6), F32, name="w")
    (m,) = g.add_node("matmul", [x, w])
    (r,) = g.add_node("reshape", [m], {"shape": (24,)})
    (e,) = g.add_node("exp", [m])
    g.set_outputs([r, e])
    exe = Executable(g)
    assert "matmul_blas(x, w)" in exe.code   # no out=: the output r is m's memory
    check_filled(exe, g, 3, np.random.default_rng(0))


def test_a_kernel_returning_its_input_keeps_it_busy():
    """``cast`` to the same dtype returns its input: the product read through it is not
    overwritten while the cast's result is alive, nor when the cast's result is returned."""
    g = Graph()
    x, w = g.add_input((4, 6), F32, name="x"), g.add_input((6, 6), F32, name="w")
    (m,) = g.add_node("matmul", [x, w])
    (c,) = g.add_node("cast", [m], {"dtype": np.dtype(F32)})
    (m2,) = g.add_node("matmul", [c, w])   # may not take m's buffer: c is still read
    (s,) = g.add_node("add", [m2, c])
    (m3,) = g.add_node("matmul", [x, w])
    (c3,) = g.add_node("cast", [m3], {"dtype": np.dtype(F32)})
    g.set_outputs([s, c3])
    exe = Executable(g)
    assert "matmul_blas(x, w, out=" in exe.code
    assert exe.code.count("out=bufs") >= 2
    check_filled(exe, g, 4, np.random.default_rng(1))
    assert "matmul_2 = matmul_blas(x, w)" in exe.code   # (m3, returned through c3)


def test_a_donated_input_is_not_written_by_a_product_that_reads_it():
    g = Graph()
    p = g.add_input((5, 5), F32, name="p")
    (m,) = g.add_node("matmul", [p, p])
    g.set_outputs([m])
    exe = Executable(g, donate={0: 0})
    assert exe.donated == {}
    a = np.random.default_rng(2).standard_normal((5, 5)).astype(np.float32)
    (got,) = exe.run([a.copy()])
    np.testing.assert_array_equal(got, a @ a)


def test_two_threads_calling_one_executable_get_their_own_results():
    g = Graph()
    x, w = g.add_input(("B", 32), F32, name="x"), g.add_input((32, 32), F32, name="w")
    (h,) = g.add_node("matmul", [x, w])
    (s,) = g.add_node("softmax", [h], {"dim": 1})
    (y,) = g.add_node("linear", [s, w])
    (o,) = g.add_node("mul", [y, 2.0])
    g.set_outputs([o])
    exe = Executable(g)
    assert exe.code.count("out=bufs") >= 3
    rng = np.random.default_rng(3)
    wa = rng.standard_normal((32, 32)).astype(np.float32)
    data = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(2)]
    want = [exe.interpret([d, wa])[0] for d in data]
    errors = []

    def worker(k):
        for _ in range(200):
            (got,) = exe.run([data[k], wa])
            if not np.array_equal(got, want[k]):
                errors.append(k)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
