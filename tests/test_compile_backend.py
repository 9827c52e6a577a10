"""``dg.compile(backend=callable)``: a compiler of dualgraph's graphs, given the optimised
graph and the first run's input arrays, whose callable runs in place of the generated code
(codegen/executable.py ``Backend``)."""
import numpy as np
import pytest

import dualgraph as dg


def test_inspecting_backend_counts_graphs_and_runs_the_generated_code():
    calls = []

    def backend(graph, example_inputs):
        calls.append((graph, [a.shape for a in example_inputs]))
        assert len(example_inputs) == len(graph.inputs)
        assert "linear" in str(graph) or "matmul" in str(graph) or "fused" in str(graph)
        return None

    model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 2))
    c = dg.compile(model, backend=backend)
    x = dg.randn(3, 4)
    with dg.no_grad():
        for _ in range(3):
            np.testing.assert_allclose(c(x).numpy(), model(x).numpy(), rtol=1e-6)
        c(dg.randn(5, 4))   # a new shape: a new graph, the backend called again
    assert len(calls) == 2
    assert calls[0][1][0] == (3, 4) and calls[1][1][0] == (5, 4)
    assert c.compile_options["backend"] is backend


def test_backend_callable_replaces_the_generated_code_forward_and_backward():
    runs = []

    def backend(graph, example_inputs):
        def run(*arrays):
            runs.append(len(graph.nodes))
            return graph(*arrays)   # the reference interpreter
        return run

    model = dg.nn.Linear(4, 2)
    c = dg.compile(model, backend=backend)
    x = dg.randn(3, 4)
    for _ in range(2):
        model.zero_grad()
        c(x).pow(2).sum().backward()
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    model(x).pow(2).sum().backward()
    for a, p in zip(got, model.parameters()):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-6)
    assert len(runs) == 4   # forward and backward graph, twice


def test_backend_in_a_training_step():
    def run_steps(compiled):
        dg.manual_seed(0)
        model = dg.nn.Linear(4, 1)
        opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = dg.compile(step, backend=lambda g, xs: (lambda *a: g(*a))) if compiled else step
        x = dg.ones(8, 4)
        return [float(fn(x)) for _ in range(4)]

    np.testing.assert_allclose(run_steps(True), run_steps(False), rtol=1e-6)


def test_wrong_arity_callable_is_a_clear_error():
    # (under no_grad the weight and bias are frozen into the graph: x is its one input)
    c = dg.compile(dg.nn.Linear(4, 2), backend=lambda graph, inputs: (lambda x, w, b: [x]))
    with pytest.raises(TypeError, match="can't take the graph's 1 input arrays"):
        with dg.no_grad():
            c(dg.randn(3, 4))


def test_wrong_output_count_or_type_is_a_clear_error():
    c = dg.compile(lambda x: (x + 1, x * 2), backend=lambda g, xs: (lambda *a: [a[0]]))
    with pytest.raises(TypeError, match="returned 1 values; it must return a list of 2"):
        c(dg.randn(3))
    c = dg.compile(lambda x: x + 1, backend=lambda g, xs: 42)
    with pytest.raises(TypeError, match="returned int; it must return a callable"):
        c(dg.randn(3))
    c = dg.compile(lambda x: x + 1,
                   backend=lambda g, xs: (lambda *a: [a[0].astype(np.float64)]))
    with pytest.raises(TypeError, match="a float64 array"):
        c(dg.randn(3))


def test_a_torch_fx_style_backend_gets_a_clear_error():
    c = dg.compile(lambda x: x + 1, backend=lambda gm, inputs: gm.forward)
    with pytest.raises(TypeError, match="not a torch FX"):
        c(dg.randn(3))
