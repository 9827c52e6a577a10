"""Freezing for inference (capture/freeze.py ``freeze_parameters``): a compiled module called
under ``no_grad`` reads its parameters and buffers as constants, so eval-mode BatchNorm
folds into its convolution; any change of a frozen tensor (an optimiser step,
``load_state_dict``, an in-place op, ``p.data = t``) makes the next call trace again with
the new values. Every check compares the compiled call with the eager module."""
import numpy as np
import pytest

import dualgraph as dg
from dualgraph.ops.conv import CONV2D
from dualgraph.ops.epilogue import CONV2D_EPILOGUE


def _model():
    dg.manual_seed(0)
    m = dg.nn.Sequential(dg.nn.Conv2d(3, 8, 3, padding=1), dg.nn.BatchNorm2d(8),
                         dg.nn.ReLU(), dg.nn.Conv2d(8, 4, 1, bias=False),
                         dg.nn.BatchNorm2d(4))
    with dg.no_grad():
        for bn in (m[1], m[4]):
            bn.running_mean.copy_(dg.randn(*bn.running_mean.shape))
            bn.running_var.copy_(dg.rand(*bn.running_var.shape) + 0.5)
            bn.weight.copy_(dg.randn(*bn.weight.shape))
    return m.eval()


def _same(compiled, model, x):
    with dg.no_grad():
        got, want = compiled(x).numpy(), model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _folded(compiled) -> bool:
    """Whether the running graph is two convolutions (one with its relu) on the input
    alone: both BatchNorms folded."""
    graph = compiled.optimized_graph
    ops = sorted(n.op.name for n in graph.nodes)
    return len(graph.inputs) == 1 and ops == [CONV2D.name, CONV2D_EPILOGUE.name]


def test_no_grad_call_folds_batchnorm():
    model = _model()
    compiled = dg.compile(model)
    x = dg.randn(2, 3, 6, 6)
    for _ in range(2):   # (the second call takes the fast path)
        _same(compiled, model, x)
    assert _folded(compiled), compiled.optimized_graph
    assert "frozen as constants" in compiled.explain()
    # the capture as traced still reads them as inputs (save(freeze=False) keeps them)
    assert len(compiled.graph.inputs) > 1


@pytest.mark.parametrize("change", ["inplace", "load_state_dict", "data", "buffer",
                                    "optimizer"])
def test_a_changed_parameter_is_never_stale(change):
    model = _model()
    compiled = dg.compile(model)
    x = dg.randn(2, 3, 6, 6)
    _same(compiled, model, x)
    _same(compiled, model, x)   # (the fast path is made now)
    conv, bn = model[0], model[1]
    if change == "inplace":
        with dg.no_grad():
            conv.weight.mul_(2.0)
    elif change == "load_state_dict":
        model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
    elif change == "data":
        conv.weight.data = conv.weight.data * 3.0
    elif change == "buffer":
        with dg.no_grad():
            bn.running_var.add_(1.0)
    else:
        opt = dg.optim.SGD(model.parameters(), lr=0.5)
        model(x).sum().backward()
        opt.step()
    _same(compiled, model, x)
    _same(compiled, model, x)
    assert _folded(compiled)


def test_training_between_evaluations_stops_freezing():
    """A compiled training step changes the parameters between no_grad evaluations: each
    change retraces, until FREEZE_LIMIT changes, then the parameters are graph inputs."""
    model = _model()
    compiled = dg.compile(model)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    x = dg.randn(2, 3, 6, 6)
    for step in range(4):
        model.train()
        opt.zero_grad()
        compiled(x).square().mean().backward()
        opt.step()
        model.eval()
        _same(compiled, model, x)
        _same(compiled, model, x)
    assert not _folded(compiled)
    assert "from now on they are graph inputs" in compiled.explain()


def test_grad_mode_and_passes_false_freeze_nothing():
    model = _model()
    x = dg.randn(2, 3, 6, 6)
    compiled = dg.compile(model)
    np.testing.assert_allclose(compiled(x).detach().numpy(), model(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    assert len(compiled.optimized_graph.inputs) > 1   # (grad enabled: inputs)
    plain = dg.compile(model, passes=False)
    _same(plain, model, x)
    assert len(plain.optimized_graph.inputs) > 1


def test_frozen_arrays_stay_the_tensors_own():
    """Freezing copies nothing and leaves the parameters writeable (the graph's constants
    are read-only views)."""
    model = _model()
    compiled = dg.compile(model)
    _same(compiled, model, dg.randn(1, 3, 4, 4))
    assert all(p._data.flags.writeable for p in model.parameters())
