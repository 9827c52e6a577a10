"""``dg.compile(module)`` stands in for the module (as torch's ``OptimizedModule``), takes
``torch.compile``'s keywords, and the scheduler's order warning holds for any optimiser."""
import collections
import copy
import dataclasses
import warnings

import numpy as np
import pytest

import dualgraph as dg


class Net(dg.nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.fc1 = dg.nn.Linear(4, 8)
        self.drop = dg.nn.Dropout(p)
        self.fc2 = dg.nn.Linear(8, 2)
        self.scale = 1.0

    def forward(self, x):
        return self.fc2(self.drop(dg.relu(self.fc1(x)))) * self.scale


def _np(t):
    return t.detach().numpy()


def _net(p=0.0):
    dg.manual_seed(0)
    return Net(p)


def test_compiled_module_is_the_module():
    model = _net()
    compiled = dg.compile(model)
    x = dg.randn(3, 4)
    assert isinstance(compiled, dg.nn.Module) and isinstance(compiled, Net)
    assert compiled._orig_mod is model
    assert compiled.fc1 is model.fc1 and compiled.scale == 1.0
    np.testing.assert_allclose(_np(compiled(x)), _np(model(x)), rtol=1e-6)
    assert compiled.graph is not None and "def " in compiled.code
    assert "1 graph(s)" in compiled.explain()
    assert "fc1" in dir(compiled) and "(_orig_mod): Net(" in repr(compiled)


def test_attribute_assignment_reaches_the_module_and_retraces():
    model = _net()
    compiled = dg.compile(model)
    x = dg.randn(3, 4)
    before = _np(compiled(x))
    compiled.scale = 3.0
    assert model.scale == 3.0 and "scale" not in vars(compiled)
    np.testing.assert_allclose(_np(compiled(x)), 3.0 * before, rtol=1e-6)
    compiled.extra = dg.nn.Linear(2, 2)
    assert model.extra is compiled.extra and "extra" in dict(model.named_children())
    del compiled.extra
    assert not hasattr(model, "extra")


def test_module_methods_through_the_compiled_object():
    model = _net()
    compiled = dg.compile(model)
    assert compiled.eval() is compiled and model.training is False
    assert compiled.train() is compiled and model.training is True
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in model.parameters()]
    assert [n for n, _ in compiled.named_parameters()] == [
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    compiled.zero_grad()
    assert compiled.requires_grad_(False) is compiled
    assert not any(p.requires_grad for p in model.parameters())
    x = dg.randn(3, 4)
    assert compiled.to(dg.float64) is compiled and model.fc1.weight.dtype == dg.float64
    np.testing.assert_allclose(_np(compiled(x.double())), _np(model(x.double())), rtol=1e-12)


def test_state_dict_keys_are_the_modules_and_round_trip():
    model = _net()
    compiled = dg.compile(model)
    state = compiled.state_dict()
    assert list(state) == list(model.state_dict()) == [
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    dg.manual_seed(1)
    other = dg.compile(Net())
    x = dg.randn(5, 4)
    assert not np.allclose(_np(other(x)), _np(compiled(x)))
    result = other.load_state_dict(state)
    assert result.missing_keys == [] and result.unexpected_keys == []
    np.testing.assert_allclose(_np(other(x)), _np(compiled(x)), rtol=1e-6)


def test_eval_and_train_switch_dropout_as_eagerly():
    model = _net(p=0.5)
    compiled = dg.compile(model)
    x = dg.randn(64, 4)
    compiled.eval()
    np.testing.assert_allclose(_np(compiled(x)), _np(model(x)), rtol=1e-6)
    compiled.train()
    hidden = dg.compile(lambda t: model.drop(t))
    ones = dg.ones(64, 8)
    dropped = _np(hidden(ones))
    assert set(np.unique(dropped)) == {0.0, 2.0}   # as eager's dropout: zeros or 1 / (1 - p)
    assert not np.allclose(_np(compiled(x)), _np(model.eval()(x)))
    model.train()
    compiled.eval()
    np.testing.assert_allclose(_np(compiled(x)), _np(model(x)), rtol=1e-6)
    assert len(compiled.cache) == 2    # one graph per training flag


def test_training_a_compiled_module_matches_eager():
    eager = _net()
    model = dg.compile(copy.deepcopy(eager))
    x, y = dg.randn(16, 4), dg.randint(0, 2, (16,))
    losses = []
    for net in (eager, model):
        opt = dg.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        run = []
        for _ in range(5):
            opt.zero_grad()
            loss = dg.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    for a, b in zip(eager.parameters(), model.parameters()):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-5, atol=1e-7)


def test_gradient_hooks_on_a_compiled_modules_leaves_run_once_per_backward():
    """A hook on a parameter (``w.register_hook(lambda g: g * 0.5)``, a gradient-norm log)
    or on an input that requires grad runs at each backward through the compiled module,
    with real gradients, as eagerly: the compiled forward's traced backward ran it too,
    so its scaling was applied twice (half the gradient, silently) and the log kept a
    symbolic value from the trace. ``autograd.grad`` through it runs them once too."""
    def run(compiled):
        net = _net()
        log = []
        net.fc1.weight.register_hook(lambda g: (log.append(g.norm()), g * 0.5)[1])
        x = dg.tensor(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32),
                      requires_grad=True)
        x.register_hook(lambda g: g * 3)
        f = dg.compile(net) if compiled else net
        grads = []
        for k in range(3):
            net.zero_grad()
            x.grad = None
            f(x * (k + 1)).pow(2).sum().backward()
            grads += [_np(net.fc1.weight.grad), _np(net.fc2.weight.grad), _np(x.grad)]
        grads += [_np(g) for g in dg.autograd.grad(f(x).sum(), [net.fc1.weight, x])]
        assert all(type(t._data) is np.ndarray for t in log)
        return grads + [_np(t) for t in log]

    want, got = run(False), run(True)
    assert len(got) == len(want) == 3 * 3 + 2 + 4
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class _HookedInForward(dg.nn.Module):
    """Grad-CAM's pattern: ``forward`` hooks its activation, the hook keeps the gradient
    (``self.gradients = grad``, or a log it appends to) or only scales it."""

    def __init__(self, keep):
        super().__init__()
        self.a, self.b = dg.nn.Linear(3, 4), dg.nn.Linear(4, 2)
        self.keep, self.gradients, self.log = keep, None, []

    def save_gradient(self, grad):
        self.gradients = grad

    def forward(self, x):
        h = dg.tanh(self.a(x))
        if h.requires_grad:
            if self.keep == "attribute":
                h.register_hook(self.save_gradient)
            if self.keep == "list":
                h.register_hook(lambda g: self.log.append(g.sum()))
            h.register_hook(lambda g: g * 2)
        return self.b(h)


@pytest.mark.parametrize("keep", ["attribute", "list", "nothing"])
def test_a_hook_registered_in_a_compiled_forward_keeping_its_gradient_breaks(keep):
    """A hook the compiled forward registers on an activation ran once, when the forward's
    backward was traced: one that keeps the gradient kept the trace's symbolic value at
    every call (reading it raised). It is a graph break, the forward eager, so the hook
    keeps each backward's gradient; one that only scales the gradient stays compiled.
    Gradients equal eager's either way."""
    def run(compiled):
        dg.manual_seed(0)
        net = _HookedInForward(keep)
        f = dg.compile(net) if compiled else net
        out = []
        for k in range(3):
            net.zero_grad()
            f(dg.ones(2, 3) * (k + 1))[:, 1].sum().backward()
            out += [_np(net.a.weight.grad)] + ([_np(net.gradients)] if keep == "attribute"
                                                else [])
        return out + [_np(t) for t in net.log], f

    (want, _), (got, f) = run(False), run(True)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert f"{int(keep != 'nothing')} graph break(s)" in f.explain().splitlines()[0]


class _Recorder:
    """pytorch-grad-cam's ``ActivationsAndGradients``: a forward hook that is a method of
    this object keeps the layer's output in a list and hooks it for its gradient."""

    def __init__(self, layer):
        self.activations, self.gradients = [], []
        layer.register_forward_hook(self.save_activation)

    def save_activation(self, module, inputs, output):
        self.activations.append(output.detach())

        def store(grad):
            self.gradients = [grad.detach()] + self.gradients
        output.register_hook(store)


def test_a_forward_hook_that_is_a_method_of_a_users_object_keeps_real_tensors():
    """The state a method hook keeps in its object (reached through the module's hooks,
    deeper in the model than the walk for kept state went, and not looked into as a
    method) held the trace's symbolic values after a compiled call (reading them raised):
    now the list the forward hook grows runs the forward's Python at every call, and the
    gradient its tensor hook keeps is a graph break; values equal eager's."""
    def run(compiled):
        dg.manual_seed(0)
        net = dg.nn.Sequential(dg.nn.Sequential(dg.nn.Linear(3, 4), dg.nn.Tanh()),
                               dg.nn.Linear(4, 2))
        rec = _Recorder(net[0][1])
        f = dg.compile(net) if compiled else net
        for k in range(3):
            net.zero_grad()
            f(dg.ones(2, 3) * (k + 1))[:, 0].sum().backward()
        return [_np(t) for t in rec.activations + rec.gradients]

    want, got = run(False), run(True)
    assert len(got) == len(want) == 6
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_compiled_module_inside_a_compiled_step():
    eager = _net()
    model = dg.compile(copy.deepcopy(eager))
    x, y = dg.randn(16, 4), dg.randint(0, 2, (16,))
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    eager_opt = dg.optim.SGD(eager.parameters(), lr=0.1)

    @dg.compile
    def step(x, y):
        opt.zero_grad()
        loss = dg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        loss = step(x, y)
        eager_opt.zero_grad()
        eager_loss = dg.nn.functional.cross_entropy(eager(x), y)
        eager_loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(loss.item(), eager_loss.item(), rtol=1e-5)
    for a, b in zip(eager.parameters(), model.parameters()):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-5, atol=1e-7)
    assert "model.fc1.weight" in str(step.graph)   # the module's parameters, by name
    model.scale = eager.scale = 0.5   # set through the compiled object: retraced
    eager_loss = dg.nn.functional.cross_entropy(eager(x), y)
    np.testing.assert_allclose(step(x, y).item(), eager_loss.item(), rtol=1e-5)
    assert "model.scale changed from 1.0 to 0.5" in step.explain()


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
@pytest.mark.parametrize("backend", ["inductor", "aot_eager", "eager"])
def test_torch_compile_keywords(mode, backend):
    model = _net()
    compiled = dg.compile(model, mode=mode, backend=backend, dynamic=False, fullgraph=True)
    x = dg.randn(3, 4)
    np.testing.assert_allclose(_np(compiled(x)), _np(model(x)), rtol=1e-6)
    assert compiled.compile_options == {"backend": backend, "mode": mode, "options": None}
    assert len(compiled.cache) == (0 if backend == "eager" else 1)   # eager: no capture
    if backend == "aot_eager":     # captured, no passes: the graph that runs is the traced one
        assert compiled.passes is False
        assert len(compiled.optimized_graph.nodes) == len(compiled.graph.nodes)


def test_torch_compile_keyword_forms():
    def f(x):
        return dg.exp(x) * 2

    assert dg.compile(f, disable=True) is f
    assert dg.compile(disable=True)(f) is f
    decorated = dg.compile(mode="max-autotune", fullgraph=True, dynamic=True)(f)
    for n in (2, 5):
        np.testing.assert_allclose(_np(decorated(dg.ones(n))), 2 * np.e * np.ones(n),
                                   rtol=1e-6)
    assert len(decorated.cache) == 1    # dynamic=True: one graph for both lengths
    fast = dg.compile(f, options={"fast_math": True, "check": True})
    assert fast.fast_math is True and fast.check is True
    assert dg.compile(f, options={"passes": False}).passes is False


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(mode="fastest"), ValueError, "unknown mode='fastest'"),
    (dict(backend="cudagraphs"), ValueError, "unknown backend='cudagraphs'"),
    (dict(mode="default", options={}), RuntimeError, "both can't be specified"),
    (dict(options={"triton.cudagraphs": True}), ValueError, "inductor options"),
    (dict(options=["fast_math"]), ValueError, "options must be a dict"),
    (dict(fullgraph="yes"), TypeError, "fullgraph must be True or False"),
    (dict(dynamic="auto"), TypeError, "dynamic must be None, True, False or a dict"),
    (dict(backend="aot_eager", passes=["cse"]), ValueError, "runs no passes"),
])
def test_torch_compile_keyword_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        dg.compile(lambda x: x, **kwargs)


class UserSGD(dg.optim.Optimizer):
    """A hand-written optimiser overriding ``step`` (never calls the base class's)."""

    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))

    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data.add_(p.grad, alpha=-group["lr"])


class DuckSGD:
    """An optimiser that doesn't subclass ``dg.optim.Optimizer``."""

    def __init__(self, params, lr):
        self.param_groups = [{"params": list(params), "lr": lr}]

    def step(self):
        for p in self.param_groups[0]["params"]:
            p.data.add_(p.grad, alpha=-self.param_groups[0]["lr"])


@pytest.mark.parametrize("cls", [UserSGD, DuckSGD, dg.optim.SGD])
def test_scheduler_order_warning_for_any_optimiser(cls):
    w = dg.ones(2, requires_grad=True)
    opt = cls([w], lr=0.1)
    sched = dg.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    (w * w).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # optimiser first: no warning
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == 0.05
    np.testing.assert_allclose(_np(w), [0.8, 0.8])
    late = cls([dg.ones(2, requires_grad=True)], lr=0.1)
    late_sched = dg.optim.lr_scheduler.ExponentialLR(late, gamma=0.5)
    with pytest.warns(UserWarning, match="before optimizer.step"):   # scheduler first
        late_sched.step()


def test_scheduler_rejects_what_is_no_optimiser():
    with pytest.raises(TypeError, match="is not an Optimizer: .*param_groups"):
        dg.optim.lr_scheduler.StepLR(object(), step_size=1)


def test_deepcopy_compiles_a_copy_of_the_module():
    model = _net()
    compiled = dg.compile(model, mode="max-autotune", fullgraph=True)
    x = dg.randn(3, 4)
    before = _np(compiled(x))
    twin = copy.deepcopy(compiled)    # (as an EMA of a compiled model is made)
    assert isinstance(twin, Net) and twin._orig_mod is not model
    assert twin.fullgraph is True and twin.compile_options["mode"] == "max-autotune"
    np.testing.assert_allclose(_np(twin(x)), before, rtol=1e-6)
    with dg.no_grad():
        twin.fc2.bias.add_(1.0)
    np.testing.assert_allclose(_np(twin(x)), before + 1.0, rtol=1e-6)
    np.testing.assert_allclose(_np(compiled(x)), before, rtol=1e-6)   # the original's own


@dataclasses.dataclass
class Output:
    logits: dg.Tensor
    loss: dg.Tensor | None = None
    aux: dict | None = None
    note: str = dataclasses.field(default="kept", init=False)


class RecordNet(dg.nn.Module):
    """Returns a dataclass whose fields are set after it is made, a dict in it."""

    def __init__(self):
        super().__init__()
        self.fc = dg.nn.Linear(4, 2)

    def forward(self, x, aux=False):
        out = Output(self.fc(x))
        out.loss = out.logits.pow(2).mean()
        if aux:
            out.aux = collections.OrderedDict(mean=out.logits.mean())
        return out


def test_a_module_returning_a_dataclass_or_ordered_dict_compiles_to_the_same_types():
    m = RecordNet()
    c, x = dg.compile(m), dg.randn(3, 4)
    for aux in (False, True, True):
        got, want = c(x, aux=aux), m(x, aux=aux)
        assert type(got) is Output and got.note == "kept"
        np.testing.assert_allclose(_np(got.loss), _np(want.loss), rtol=1e-6)
        if aux:
            assert type(got.aux) is collections.OrderedDict
            np.testing.assert_allclose(_np(got.aux["mean"]), _np(want.aux["mean"]), rtol=1e-6)
        got.loss.backward()
    assert len(c.cache) == 2


def test_a_dataclass_argument_is_a_structure_of_graph_inputs():
    """Its fields' tensors are inputs named by field (``batch.x``): new values reuse the
    graph."""
    @dataclasses.dataclass
    class Batch:
        x: object
        scale: float

    m = dg.nn.Linear(3, 2)
    c = dg.compile(lambda batch: m(batch.x) * batch.scale)
    for i in range(3):
        batch = Batch(dg.randn(4, 3), 2.0)
        np.testing.assert_allclose(_np(c(batch)), _np(m(batch.x) * 2.0), rtol=1e-6)
    assert len(c.cache) == 1 and "batch.x: shape (4, 3)" in c.explain()


def test_tensors_returned_inside_an_object_of_another_class_break_the_graph():
    class Box:
        def __init__(self, t):
            self.t = t

    m = dg.nn.Linear(3, 2)

    def f(x):
        return Box(m(x))

    c = dg.compile(f)
    with pytest.warns(UserWarning, match=r"returning tensors inside an object \(Box.t\)"):
        c(dg.randn(2, 3))
    for _ in range(2):
        x = dg.randn(2, 3)
        np.testing.assert_allclose(_np(c(x).t), _np(m(x)), rtol=1e-6)


@pytest.mark.parametrize("compile_model", [False, True])
def test_forward_hooks_keeping_activations_in_a_closure_dict(compile_model):
    """Hooks that keep each block's activation in a dict of the enclosing function (an
    activation logger), two of the blocks checkpointed (their hooks run again in the
    backward): after each compiled call the dict holds eager's values, not traced ones."""
    from dualgraph.utils.checkpoint import checkpoint

    def run(compiled):
        dg.manual_seed(0)
        blocks = dg.nn.ModuleList(dg.nn.Sequential(dg.nn.Linear(4, 4), dg.nn.Tanh())
                                  for _ in range(3))
        stats = {}

        def keep(name):
            def hook(module, inputs, output):
                stats[name] = output.detach().abs().mean()
            return hook

        for i, b in enumerate(blocks):
            b.register_forward_hook(keep(i))

        class Model(dg.nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = blocks

            def forward(self, x):
                for i, b in enumerate(self.blocks):
                    x = checkpoint(b, x, use_reentrant=False) if i else b(x)
                return x

        model = Model()
        opt = dg.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            loss = model(x).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        if compiled and compile_model:
            model = dg.compile(model)
        elif compiled:
            step = dg.compile(step)
        out = []
        for k in range(4):
            loss = step(dg.tensor(np.full((2, 4), 0.1 * (k + 1), np.float32)))
            out.append([loss.item()] + [float(stats[i]) for i in range(3)])
        if compiled:   # (the hooks the backward runs again write the forward's places)
            report = (model if compile_model else step).explain()
            assert "0 graph break(s)" in report.splitlines()[0], report
        return out

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6)
