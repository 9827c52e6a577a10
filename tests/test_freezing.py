"""Freezing for inference (capture/freeze.py ``freeze_parameters``): a compiled module called
under ``no_grad`` reads its parameters and buffers as constants, so eval-mode BatchNorm
folds into its convolution; any change of a frozen tensor (an optimiser step,
``load_state_dict``, an in-place op, ``p.data = t``) makes the next call trace again with
the new values. Every check compares the compiled call with the eager module."""
import ast
from pathlib import Path

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.tensor import MUTATIONS
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


CHANGES = ["inplace", "load_state_dict", "data", "buffer", "optimizer", "copy", "view",
           "alias", "index", "reshape_", "compiled_write", "double", "buffer_assigned",
           "swapped", "attribute", "train"]


def _change(change, model, x):
    """Change ``model`` (and for ``double`` the input: returned) as a user may between
    calls, in each of the ways a frozen graph must see."""
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
    elif change == "optimizer":
        opt = dg.optim.SGD(model.parameters(), lr=0.5)
        model(x).sum().backward()
        opt.step()
    elif change == "copy":
        with dg.no_grad():
            conv.bias.copy_(dg.randn(8))
    elif change == "view":   # (a write through a view: the version counter it shares)
        with dg.no_grad():
            conv.weight.view(-1)[:5].add_(1.0)
    elif change == "alias":
        conv.weight.data.mul_(-1.0)
    elif change == "index":
        with dg.no_grad():
            conv.bias[3] = 7.0
    elif change == "reshape_":   # (nothing written: the version moves, as torch's)
        with dg.no_grad():
            bn.running_mean.unsqueeze_(0).squeeze_(0)
            bn.running_mean.add_(0.5)
    elif change == "compiled_write":   # (another compiled call writes it back)
        step = dg.compile(lambda: conv.weight.mul_(0.5))
        with dg.no_grad():
            step()
            step()
    elif change == "double":
        model.double()
        return x.double()
    elif change == "buffer_assigned":
        bn.running_mean = dg.randn(8)
    elif change == "swapped":
        model[3] = dg.nn.Conv2d(8, 4, 1)
    elif change == "attribute":
        bn.eps = 0.5
    else:
        model.train()
    return x


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_parameter_is_never_stale(change):
    """Each change after the fast path is made (whose guards read the frozen tensors only
    when ``tensor.MUTATIONS`` moved): the next calls give what eager gives."""
    model = _model()
    compiled = dg.compile(model)
    x = dg.randn(2, 3, 6, 6)
    _same(compiled, model, x)
    _same(compiled, model, x)   # (the fast path is made now)
    assert compiled._fast is not None
    x = _change(change, model, x)
    _same(compiled, model, x)
    _same(compiled, model, x)
    # (a changed tensor keeps the folding: it is traced again with the new values)
    assert _folded(compiled) or change in ("swapped", "attribute", "train")


def test_a_frozen_call_counts_no_change_so_the_next_skips_its_tensors():
    """A compiled inference call changes no tensor that guards read: the count of changes
    stays, so the next call compares one number instead of reading 7 tensors."""
    model = _model()
    compiled = dg.compile(model)
    x = dg.randn(2, 3, 6, 6)
    _same(compiled, model, x)
    _same(compiled, model, x)
    count = MUTATIONS[0]
    with dg.no_grad():
        compiled(x)
        compiled(x)
    assert MUTATIONS[0] == count
    assert "if seen != checked[0]:" in compiled._fast.source


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


# functions that give a tensor they have just made its array or version counter (no graph
# or guard holds it yet), by file
MAKERS = {"tensor.py": {"__init__", "_make", "bump"}, "dispatch.py": {"apply", "_shells"},
          "ops/views.py": {"own_if_copied"}, "capture/ast/rows.py": {"_stand_in"}}


def _writes_state(node) -> bool:
    """Whether statement ``node`` assigns a tensor's ``_data`` or ``_version`` or an item of
    its version counter. (A write into the array, ``t._data[...] = v``, moves no version:
    the guards do not see it, as they do not see writes through ``t.numpy()``.)"""
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, ast.AugAssign) else [])
    for target in targets:
        for t in ast.walk(target):
            if isinstance(t, ast.Attribute) and t.attr in ("_data", "_version") and (
                    isinstance(t.ctx, ast.Store)):
                return True
            if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute)
                    and t.value.attr == "_version"):
                return True
    return False


def test_every_write_of_a_tensors_array_or_version_is_counted():
    """Every function of dualgraph that gives an existing tensor a new array or version
    counter, or moves its version, counts it in ``tensor.MUTATIONS`` (or calls ``bump``),
    which the frozen guards trust: a write not counted would leave a compiled call stale."""
    root = Path(dg.__file__).parent
    uncounted = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if fn.name in MAKERS.get(rel, ()):
                continue
            own = [n for n in ast.walk(fn) if _writes_state(n)]
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            if own and not names & {"MUTATIONS", "bump"}:
                uncounted.append(f"{rel}:{own[0].lineno} ({fn.name})")
    assert not uncounted, uncounted
