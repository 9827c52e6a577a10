"""Small fused groups of many ops run as register programs (``codegen/program.py``): they
equal the reference interpreter and eager execution to the bit, reuse registers, run the
reductions with their own kernels, and leave what they cannot express to NumPy, saying why.
The graphs here share one set of ops, so the interpreter is compiled once per dtype."""
import numpy as np
import pytest

import dualgraph as dg
from dualgraph.codegen import Executable
from dualgraph.codegen.program import PROGRAM_MIN_OPS, Program
from dualgraph.graph import Graph
from dualgraph.graph.interpret import interpret
from dualgraph.kernels import numba_available

pytestmark = pytest.mark.skipif(not numba_available(), reason="Numba is not installed")

UNARY = ["neg", "sin", "cos", "abs", "sqrt", "relu"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "relu_backward"]


def random_chain_graph(seed, dtype="float32", shape=(3, 5), n_ops=60):
    """Random elementwise ops (each of UNARY and BINARY at least once; float64 has no sin
    or cos in programs) reading earlier values, a full-size and a size-1 input and Python
    numbers (among them -0.0)."""
    rng = np.random.default_rng(seed)
    unary = UNARY if dtype == "float32" else [u for u in UNARY if u not in ("sin", "cos")]
    g = Graph()
    values = [g.add_input(shape, dtype, name="x"), g.add_input((1,), dtype, name="s")]
    ops = unary + BINARY + list(rng.choice(unary + BINARY, n_ops - len(unary + BINARY)))
    rng.shuffle(ops)
    for op in ops:
        def operand():
            if rng.random() < 0.2:
                return float(rng.choice([2.5, -0.0, 0.0, 1e-3, -7.0]))
            return values[int(rng.integers(max(0, len(values) - 8), len(values)))]
        args = [operand()] if op in unary else [operand(), operand()]
        if op == "relu_backward" or all(isinstance(a, float) for a in args):
            args = [a if not isinstance(a, float) else values[-1] for a in args]
        values.append(g.add_node(op, args)[0])
    g.set_outputs([values[-1], values[-2], values[len(values) // 2]])
    return g


def inputs_for(graph, seed):
    rng = np.random.default_rng(seed)
    arrays = [(rng.normal(size=v.shape) * 3).astype(v.dtype) for v in graph.inputs]
    arrays[0].reshape(-1)[:4] = [0.0, -0.0, np.inf, np.nan]
    return arrays


def programs(exe):
    return [k.lowering for k in exe.kernels.values() if isinstance(k.lowering, Program)]


def assert_bits_equal(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
        assert (np.signbit(g) == np.signbit(w))[~np.isnan(w)].all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(4))
def test_random_programs_equal_the_interpreter_to_the_bit(seed, dtype):
    graph = random_chain_graph(seed, dtype)
    exe = Executable(graph, passes={"fuse_elementwise"})
    (program,) = programs(exe)
    args = inputs_for(graph, seed)
    with np.errstate(all="ignore"):
        want = interpret(graph, *args)
        for _ in range(2):   # the second run writes into the reused buffers
            assert_bits_equal(exe.run(args), want)
    assert program.n_registers < len(graph.nodes)   # dead values' registers are reused


def test_float64_sin_leaves_the_group_to_numpy():
    g = Graph()
    t = g.add_input((4,), "float64", name="x")
    for i in range(PROGRAM_MIN_OPS):
        (t,) = g.add_node("sin" if i % 2 else "mul", [t] if i % 2 else [t, 1.5])
    g.set_outputs([t])
    exe = Executable(g, passes={"fuse_elementwise"})
    (kernel,) = exe.kernels.values()
    assert kernel.lowering is None
    assert "only float32 has a scalar version" in kernel.why_fallback


def test_a_reduction_runs_with_its_kernel():
    g = Graph()
    x = g.add_input((16,), "float32", name="x")
    t = x
    for i in range(PROGRAM_MIN_OPS):
        (t,) = g.add_node("sin" if i % 2 else "mul", [t] if i % 2 else [t, 1.01])
    (total,) = g.add_node("sum", [t], {"dims": (0,), "keepdim": False, "dtype": None})
    (u,) = g.add_node("mul", [t, total])
    (v,) = g.add_node("sub", [u, 0.5])
    g.set_outputs([total, v])
    exe = Executable(g, passes={"fuse_elementwise"})
    (program,) = programs(exe)
    assert [type(first).__name__ for first, _ in program._split()][-1] == "Node"
    args = [np.random.default_rng(3).normal(size=16).astype(np.float32)]
    want = interpret(g, *args)
    assert_bits_equal(exe.run(args), want)
    assert exe.run(args)[0].shape == ()


def test_compiled_tiny_ops_equal_eager_to_the_bit():
    """W6 in small: the traced forward and backward are one program."""
    x0 = np.random.default_rng(0).random(16).astype(np.float32)

    def step(x):
        y = x
        for _ in range(40):
            y = y * 0.999 + 0.001 * dg.sin(y)
        loss = y.sum()
        (grad,) = dg.autograd.grad(loss, x)
        return loss, grad
    compiled = dg.compile(step)
    got = compiled(dg.tensor(x0, requires_grad=True))
    want = step(dg.tensor(x0, requires_grad=True))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    source = compiled._last.executable.kernel_code()
    assert "sin32(" in source and "cos32(" in source
    assert "= sin(r" in source and "# inputs: r0 = %" in source   # the listing


def test_what_a_program_cannot_express_runs_with_numpy():
    def chain(shape_b, dtype_b="float32", n=PROGRAM_MIN_OPS):
        g = Graph()
        x = g.add_input((3, 5), "float32", name="x")
        b = g.add_input(shape_b, dtype_b, name="b")
        (t,) = g.add_node("add", [x, b])
        for _ in range(n):
            (t,) = g.add_node("mul", [t, 0.5])
        g.set_outputs([t])
        return Executable(g, passes={"fuse_elementwise"})
    for exe, why in ((chain((5,)), "is broadcast in"),
                     (chain((1,), "float64"), "one float dtype"),
                     (chain((1,), n=3), "NumPy's calls are cheaper")):
        (kernel,) = exe.kernels.values()
        assert kernel.lowering is None and why in kernel.why_fallback, kernel.why_fallback
        args = inputs_for(exe.graph, 1)
        assert_bits_equal(exe.run(args), interpret(exe.graph, *args))


def test_a_group_ending_in_a_reduction_over_some_dims_runs_with_numpy():
    """The reduction's result (f32[3] of f32[3,5]) broadcasts with nothing else in the group;
    the check raised NumPy's ValueError instead of falling back (test_graph_fuzz found it)."""
    g = Graph()
    t = g.add_input((3, 5), "float32", name="x")
    for _ in range(PROGRAM_MIN_OPS):
        (t,) = g.add_node("mul", [t, 0.5])
    (s,) = g.add_node("sum", [t], {"dims": (1,), "keepdim": False, "dtype": None})
    g.set_outputs([s])
    exe = Executable(g, passes={"fuse_elementwise"})
    (kernel,) = exe.kernels.values()
    assert kernel.lowering is None and "do not broadcast" in kernel.why_fallback
    args = inputs_for(exe.graph, 1)
    assert_bits_equal(exe.run(args), interpret(exe.graph, *args))
