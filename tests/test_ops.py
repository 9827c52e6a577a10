"""Every registry op, forward and gradients, against PyTorch and finite differences; and
every op with a decomposition (each compiler-only op has one) against it.

The rows live in ``tests/optable/``; this file only runs them. A registry op without a row
fails ``test_every_registry_op_has_a_row``.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops import REGISTRY

import optable
from optable import In, OpCase

CASES: list[OpCase] = []
for _info in pkgutil.iter_modules(optable.__path__):
    CASES += importlib.import_module(f"optable.{_info.name}").CASES

TOL = {"float32": (1e-5, 1e-4), "float64": (1e-10, 1e-8), "float16": (2e-3, 2e-3),
       "bfloat16": (2e-2, 2e-2)}
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
                "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
                "bool": torch.bool}


def make_inputs(case: OpCase, dtype: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [spec.make(rng, dtype) if isinstance(spec, In) else spec for spec in case.inputs]


def _convert(lib, arrays, case, requires_grad):
    """The case's inputs as ``lib`` tensors (bfloat16 goes through float32: neither library
    takes ml_dtypes arrays directly)."""
    bf16 = dg.bfloat16 if lib is dg else torch.bfloat16
    out = []
    for spec, a in zip(case.inputs, arrays):
        if isinstance(spec, In):
            if a.dtype.name == "bfloat16":
                t = lib.tensor(a.astype(np.float32)).to(bf16)
            else:
                t = lib.tensor(a)
            if requires_grad and spec.is_float and spec.grad:
                t.requires_grad_()
            out.append(t)
        else:
            out.append(a)
    return out


def to_dg(arrays, case, requires_grad):
    return _convert(dg, arrays, case, requires_grad)


def to_torch(arrays, case, requires_grad):
    return _convert(torch, arrays, case, requires_grad)


def as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def to_numpy(t):
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.dtype == torch.bfloat16:
            return t.float().numpy()
        return t.numpy()
    a = t.detach().numpy()
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def assert_close(got, want, atol, rtol, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch's {want.shape}"
    if want.dtype == np.bool_ or want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=what)


def case_function(case, arrays):
    """The row as a function of its tensor inputs only (its plain values closed over)."""
    specs = case.inputs

    def fn(*tensors):
        it = iter(tensors)
        args = [next(it) if isinstance(s, In) else a for s, a in zip(specs, arrays)]
        return case.fn(dg, *args)
    tensors = tuple(dg.tensor(a) for s, a in zip(specs, arrays) if isinstance(s, In))
    return fn, tensors


def ops_traced(fn, tensors) -> set:
    """The ops of the row's graph (none for rows that can't be captured)."""
    try:
        traced = dg.jit.trace(fn, tensors)
    except dg.errors.CaptureError:
        return set()
    return {node.op.name for node in traced.graph.nodes}


def check_dtype(dg_out, torch_out, what):
    want = str(torch_out.dtype).replace("torch.", "")
    assert dg_out.dtype.name == want, f"{what}: dtype {dg_out.dtype.name} != torch's {want}"


def test_every_registry_op_has_a_row():
    covered = {case.op for case in CASES}
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"registry ops without a test row in tests/optable/: {missing}"
    unknown = sorted(covered - set(REGISTRY))
    assert not unknown, f"rows name ops that are not in the registry: {unknown}"


FORWARD = [(c, d) for c in CASES for d in c.dtypes]


@pytest.mark.parametrize("case,dtype", FORWARD, ids=[f"{c.id}-{d}" for c, d in FORWARD])
def test_forward_matches_torch(case, dtype, monkeypatch):
    arrays = make_inputs(case, dtype)
    op, calls = REGISTRY[case.op], []
    kernel = op.kernel
    monkeypatch.setattr(op, "kernel", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    got = as_list(case.fn(dg, *to_dg(arrays, case, False)))
    if not calls and "runs_no_op" not in case.extra:   # (eager setitem writes in place)
        assert case.op in ops_traced(*case_function(case, arrays)), \
            f"row {case.id} never runs its op {case.op!r}, eagerly or traced"
    want = as_list(case.fn(torch, *to_torch(arrays, case, False)))
    assert len(got) == len(want)
    atol, rtol = TOL[dtype]
    atol, rtol = max(atol, case.atol if dtype == "float32" else 0), max(rtol, case.rtol
                                                                          if dtype == "float32"
                                                                          else 0)
    for i, (g, w) in enumerate(zip(got, want)):
        check_dtype(g, w, f"{case.id} output {i}")
        assert_close(to_numpy(g), to_numpy(w), atol, rtol, f"{case.id} output {i}")


GRAD = [c for c in CASES if c.grad]


@pytest.mark.parametrize("case", GRAD, ids=[c.id for c in GRAD])
def test_gradients_match_torch(case):
    arrays = make_inputs(case, "float32")
    dg_in, t_in = to_dg(arrays, case, True), to_torch(arrays, case, True)
    got, want = as_list(case.fn(dg, *dg_in)), as_list(case.fn(torch, *t_in))
    rng = np.random.default_rng(1)
    dg_outs, t_outs, dg_cts, t_cts = [], [], [], []
    for g, w in zip(got, want):
        if w.requires_grad:
            v = rng.standard_normal(tuple(w.shape)).astype(np.float32)
            dg_outs.append(g)
            t_outs.append(w)
            dg_cts.append(dg.tensor(v).to(g.dtype))
            t_cts.append(torch.tensor(v).to(w.dtype))
    assert t_outs, f"{case.id}: no differentiable output; set grad=False on the row"
    dg_wrt = [t for t in dg_in if isinstance(t, dg.Tensor) and t.requires_grad]
    t_wrt = [t for t in t_in if isinstance(t, torch.Tensor) and t.requires_grad]
    g_dg = dg.autograd.grad(dg_outs, dg_wrt, dg_cts, allow_unused=True)
    g_t = torch.autograd.grad(t_outs, t_wrt, t_cts, allow_unused=True)
    for i, (a, b) in enumerate(zip(g_dg, g_t)):
        if b is None:
            assert a is None or np.allclose(to_numpy(a), 0), f"{case.id}: grad {i} not None"
            continue
        assert a is not None, f"{case.id}: dualgraph gave no gradient for input {i}"
        assert_close(to_numpy(a), to_numpy(b), max(case.atol, 1e-4), max(case.rtol, 1e-3),
                     f"{case.id} grad of input {i}")


FD = [c for c in CASES if c.grad and c.gradcheck]


@pytest.mark.parametrize("case", FD, ids=[c.id for c in FD])
def test_gradients_match_finite_differences(case):
    arrays = make_inputs(case, "float64")
    dg_in = to_dg(arrays, case, True)
    assert dg.autograd.gradcheck(lambda *xs: case.fn(dg, *xs), dg_in, eps=1e-6,
                                 atol=1e-5, rtol=1e-4)


# -- compiler-only ops against their decompositions -------------------------------------------
# An op named for a gradient exists for autodiff's speed: it must be flagged compiler-only.
GRADIENT_SUFFIXES = ("_backward", "_grad")
DECOMPOSITION_RTOL = {"float64": 1e-9, "float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


def test_compiler_only_ops_name_their_decomposition():
    unflagged = sorted(name for name, op in REGISTRY.items()
                       if name.endswith(GRADIENT_SUFFIXES) and not op.compiler_only)
    assert not unflagged, f"ops named for a gradient but not flagged compiler_only: {unflagged}"
    missing = sorted(name for name, op in REGISTRY.items()
                     if op.compiler_only and op.decomposition is None)
    assert not missing, f"compiler-only ops without a decomposition: {missing}"


def record_kernel_calls(op, monkeypatch) -> list:
    """While the test runs, every call of ``op``'s kernel as (inputs, attrs, outputs), with
    copies of the arrays as they were."""
    calls, kernel = [], op.kernel

    def recording(*args, **attrs):
        inputs = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        out = kernel(*args, **attrs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        calls.append((inputs, attrs, [None if o is None else np.array(o) for o in outs]))
        return out
    monkeypatch.setattr(op, "kernel", recording)
    return calls


def decompose(op, inputs, attrs):
    """``op``'s decomposition run eagerly on the recorded kernel inputs, and the ops of its
    traced graph."""
    from dualgraph.capture.trace import Tracer
    from dualgraph.tensor import Tensor

    def run():
        args = [Tensor._make(a) if isinstance(a, np.ndarray) else a for a in inputs]
        return op.decomposition(*args, **attrs)
    with dg.no_grad():
        got = run()
        with Tracer() as tracer:
            run()
    return as_list(got), {node.op for node in tracer.graph.nodes}


DECOMPOSED = [(c, d) for c in CASES if REGISTRY[c.op].decomposition is not None
              for d in c.dtypes]


@pytest.mark.parametrize("case,dtype", DECOMPOSED, ids=[f"{c.id}-{d}" for c, d in DECOMPOSED])
def test_kernel_matches_decomposition(case, dtype, monkeypatch):
    """The kernel, on the inputs the row gives it, against its decomposition: the same
    types, values to the dtype's rounding, and only ordinary ops in the decomposition."""
    op = REGISTRY[case.op]
    calls = record_kernel_calls(op, monkeypatch)
    case.fn(dg, *to_dg(make_inputs(case, dtype), case, False))
    monkeypatch.undo()
    assert calls, f"row {case.id} never runs the kernel of {case.op!r} eagerly"
    check_calls(op, calls, dtype, case.id)


@pytest.mark.parametrize("case", GRAD, ids=[c.id for c in GRAD])
def test_backward_kernels_match_decomposition(case, monkeypatch):
    """Every compiler-only op that the row's gradients run (the backward ops, on the shapes
    and attrs of every differentiable row) against its decomposition, call by call."""
    calls = {op: record_kernel_calls(op, monkeypatch) for op in REGISTRY.values()
             if op.compiler_only}
    inputs = to_dg(make_inputs(case, "float32"), case, True)
    outs = [o for o in as_list(case.fn(dg, *inputs)) if o.requires_grad]
    wrt = [t for t in inputs if isinstance(t, dg.Tensor) and t.requires_grad]
    if outs and wrt:
        rng = np.random.default_rng(1)
        cotangents = [dg.tensor(rng.standard_normal(tuple(o.shape))).to(o.dtype) for o in outs]
        dg.autograd.grad(outs, wrt, cotangents, allow_unused=True)
    monkeypatch.undo()
    for op, op_calls in calls.items():
        check_calls(op, op_calls, "float32", f"{case.id} ({op.name})")


def check_calls(op, calls, dtype, what):
    """Each recorded kernel call of ``op`` against its decomposition on the same inputs."""
    for inputs, attrs, want in calls:
        got, ops = decompose(op, inputs, attrs)
        special = sorted(o.name for o in ops if o.compiler_only)
        assert not special, f"{op.name}'s decomposition uses compiler-only ops {special}"
        assert len(got) == len(want), f"{what}: {len(got)} outputs, the kernel {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            output = f"{what} output {i}"
            if w is None:
                assert g is None, f"{output}: the kernel gives None"
                continue
            g = g.numpy()
            assert (g.dtype, g.shape) == (w.dtype, w.shape), \
                f"{output}: {g.dtype}{list(g.shape)}, the kernel {w.dtype}{list(w.shape)}"
            if w.dtype.kind not in "fV":
                np.testing.assert_array_equal(g, w, err_msg=output)
                continue
            g, w = g.astype(np.float64), w.astype(np.float64)
            rtol = DECOMPOSITION_RTOL[dtype]
            scale = max(1.0, float(np.abs(w).max(initial=0)))
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=output)
