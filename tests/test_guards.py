"""Guards on the Python values a compiled function reads (capture/pyvalues.py): module
attributes, globals, closures, dict items and a hand-written optimiser's Python state. A
change retraces (``explain()`` names it) and what the traced Python wrote is written again
after every call, so compiled results equal eager ones, value by value."""
import io
import math
import warnings

import numpy as np
import pytest

import dualgraph as dg


class Scaled(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = dg.nn.Linear(3, 2)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


def test_module_attribute_change_retraces_and_is_named():
    m = Scaled()
    c = dg.compile(m)
    x = dg.randn(4, 3)
    with dg.no_grad():
        np.testing.assert_allclose(c(x).numpy(), m(x).numpy(), rtol=1e-6)
        c(x)   # the fast path
        m.scale = 5.0
        np.testing.assert_allclose(c(x).numpy(), m(x).numpy(), rtol=1e-6)
        m.lin.in_features_note = "x"   # an unread attribute: retraces, stays right
        np.testing.assert_allclose(c(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert "self.scale changed from 2.0 to 5.0" in c.explain()


SCALE = 3.0
CONFIG = {"shift": 1.0, "inner": {"power": 2}}


def uses_globals(x):
    return (x * SCALE + CONFIG["shift"]) ** CONFIG["inner"]["power"]


def test_global_and_dict_values_are_guarded():
    global SCALE
    c = dg.compile(uses_globals)
    x = dg.randn(5)
    for change in (lambda: None, lambda: globals().__setitem__("SCALE", 4.0),
                   lambda: CONFIG.__setitem__("shift", -2.0),
                   lambda: CONFIG["inner"].__setitem__("power", 3)):
        change()
        np.testing.assert_allclose(c(x).numpy(), uses_globals(x).numpy(), rtol=1e-6)
        np.testing.assert_allclose(c(x).numpy(), uses_globals(x).numpy(), rtol=1e-6)
    SCALE = 3.0
    CONFIG.update(shift=1.0, inner={"power": 2})
    report = c.explain()
    assert "SCALE changed from 3.0 to 4.0" in report
    assert "CONFIG['shift'] changed from 1.0 to -2.0" in report
    assert "CONFIG['inner']['power'] changed from 2 to 3" in report


def test_closure_value_and_type_are_guarded():
    k = 2
    c = dg.compile(lambda x: x * k)
    x = dg.tensor([1, 2, 3])
    assert c(x).tolist() == [2, 4, 6]
    k = 2.5   # (int * float: another dtype)
    assert c(x).dtype == (x * k).dtype and c(x).tolist() == (x * k).tolist()


def test_attribute_named_like_a_global_counter_does_not_retrace():
    model = dg.nn.Linear(3, 1)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x):   # names the attribute ``step``, not the global loop counter
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    c = dg.compile(train_step)
    namespace = train_step.__globals__
    x = dg.randn(4, 3)
    for namespace["step"] in range(5):
        c(x)
    namespace.pop("step")
    assert len(c.cache) <= 2


def test_scope_module_training_flag_is_guarded():
    model = dg.nn.Sequential(dg.nn.Linear(4, 4), dg.nn.Dropout(0.5))
    c = dg.compile(lambda x: model(x))
    x = dg.ones(2, 4)
    with dg.no_grad():
        c(x)
        model.eval()
        np.testing.assert_allclose(c(x).numpy(), model(x).numpy(), rtol=1e-6)


class Counting(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * 2


def test_python_writes_are_replayed():
    m = Counting()
    c = dg.compile(m)
    x = dg.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (each call retraces: the count changes)
        for _ in range(12):
            c(x)
    assert m.calls == 12


# (a hand-written optimiser's Python int step: tests/test_number_inputs.py)


def test_fast_path_checks_python_values():
    model = dg.nn.Linear(3, 2)
    bias = [1.0]
    scale = 2.0

    def f(x):
        return model(x) * scale

    c = dg.compile(f)
    x = dg.randn(1, 3)
    with dg.no_grad():
        c(x), c(x)
        assert c._fast is not None and "read(slots)" in c._fast.source
        scale = 4.0
        np.testing.assert_allclose(c(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert bias == [1.0] and math.isfinite(scale)


@pytest.mark.parametrize("grad", [True, False])   # (False: the inlined fast path's guards)
def test_the_default_dtype_is_guarded(grad):
    """Code that makes tensors (``dg.zeros(n)``, ``arange`` of floats) or mixes int tensors
    with Python floats traces to the default dtype: a call after ``dg.set_default_dtype``
    changed it (scientific code switches to float64 and back) retraces, as eager follows
    it, instead of running the graph of the other dtype."""
    def f(x, k):
        return x + dg.zeros(3) + k * 0.5 + dg.arange(0, 1.5, 0.5)

    c = dg.compile(f)
    x, k = dg.ones(3, dtype=dg.float32), dg.arange(3)
    try:
        for default in (dg.float32, dg.float64, dg.float32, dg.float64):
            dg.set_default_dtype(default)
            with dg.set_grad_enabled(grad):
                for _ in range(2):
                    want, got = f(x, k), c(x, k)
                    assert got.dtype == want.dtype == default
                    np.testing.assert_array_equal(got.numpy(), want.numpy())
    finally:
        dg.set_default_dtype(dg.float32)
    assert "the default dtype changed from float32 to float64" in c.explain()
    assert "default dtype float64" in c.explain()


def test_set_grad_enabled_called_as_a_function_inside_runs_at_every_call():
    """A compiled function that leaves grad mode changed (``torch.set_grad_enabled(False)``
    as a plain call) runs its Python at every call, so each call leaves it as eager's does;
    one graph would have set it at its first call only."""
    lin = dg.nn.Linear(3, 2)

    def infer(x):
        dg.set_grad_enabled(False)
        return lin(x)

    c = dg.compile(infer)
    try:
        for fn in (infer, c, c, c):
            dg.set_grad_enabled(True)
            y = fn(dg.ones(2, 3))
            assert not y.requires_grad and not dg.is_grad_enabled()
            np.testing.assert_allclose(y.numpy(), infer(dg.ones(2, 3)).numpy(), rtol=1e-6)
    finally:
        dg.set_grad_enabled(True)
    assert "it sets grad mode" in c.explain()


def _lambda_lr(opt):
    return dg.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(s / 12)))


def _one_cycle(opt):
    return dg.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=12)


@pytest.mark.parametrize("make_opt, make_sched", [
    (lambda ps: dg.optim.SGD(ps, lr=0.1, momentum=0.9), _lambda_lr),
    (lambda ps: dg.optim.Adam(ps, lr=0.01), _lambda_lr),
    (lambda ps: dg.optim.AdamW(ps, lr=0.01, weight_decay=0.1), _lambda_lr),
    # (found by a CIFAR ResNet program, tests/torch_programs/resnet_cifar.py: OneCycleLR
    # moves SGD's momentum, or Adam's beta1, at every step too)
    (lambda ps: dg.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3), _one_cycle),
    (lambda ps: dg.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True), _one_cycle),
    (lambda ps: dg.optim.AdamW(ps, lr=0.01), _one_cycle),
    (lambda ps: dg.optim.NAdam(ps, lr=0.01), _one_cycle)])
def test_scheduled_learning_rate_becomes_a_graph_input(make_opt, make_sched):
    """A schedule changing ``lr`` (and momentum) at every step retraces once, then feeds
    it to the graph."""
    rng = np.random.default_rng(0)
    xs = [dg.tensor(rng.standard_normal((8, 4)).astype(np.float32)) for _ in range(12)]
    results = []
    for compiled in (False, True):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 1))
        opt = make_opt(model.parameters())
        sched = make_sched(opt)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = dg.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # (no retrace limit, no graph break)
            for x in xs:
                fn(x)
                sched.step()
        results.append([p.detach().numpy().copy() for p in model.parameters()])
        if compiled:
            assert len(fn.cache) <= 3
            assert "changed again" in fn.explain() and "graph input" in fn.explain()
            assert fn._fast is not None   # (the fast path feeds it too)
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _step_lr(opt):
    return dg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


@pytest.mark.parametrize("make_sched", [_lambda_lr, _one_cycle, _step_lr])
@pytest.mark.parametrize("tensor_lr", [False, True])
def test_a_scheduler_stepped_inside_the_compiled_step_advances_as_eager(make_sched,
                                                                        tensor_lr):
    """``opt.step(); sched.step()`` inside the compiled function (a Trainer-style training
    steps): the schedule froze, silently, once the learning rate was a graph input (the
    graph wrote the traced call's rate at every call and ``last_epoch`` stayed where the
    trace left it). A trace that steps a scheduler runs the function's Python at every
    call: the rates, ``last_epoch``, ``get_last_lr()`` and the parameters are eager's, and
    ``explain()`` says why. Also with ``lr`` a tensor the scheduler writes in place."""
    rng = np.random.default_rng(0)
    xs = [dg.tensor(rng.standard_normal((8, 4)).astype(np.float32)) for _ in range(10)]
    results = []
    for compiled in (False, True):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 1))
        opt = dg.optim.SGD(model.parameters(), lr=dg.tensor(0.05) if tensor_lr else 0.05,
                           momentum=0.9)
        sched = make_sched(opt)

        def step(x):
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            return loss

        fn = dg.compile(step) if compiled else step
        log = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x in xs:
                loss = fn(x)
                log.append((loss.item(), float(opt.param_groups[0]["lr"]),
                            float(sched.get_last_lr()[0]), sched.last_epoch))
        results.append((log, [p.detach().numpy().copy() for p in model.parameters()]))
    (eager_log, eager_params), (log, params) = results
    assert [e[3] for e in log] == [e[3] for e in eager_log] == list(range(1, 11))
    np.testing.assert_allclose(np.array(log)[:, :3], np.array(eager_log)[:, :3], rtol=1e-6)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert "steps a learning-rate scheduler" in fn.explain()


@pytest.mark.parametrize("kind", ["counter", "nested", "read", "append", "pop", "in_dict"])
def test_python_scalars_in_lists_are_guarded_and_written_back(kind):
    """Scalars held in lists the function reaches (``updates = [0]`` bumped by ``updates[0]
    += 1`` to derive an EMA decay, a list read after the caller changed it, ``hist.append``,
    ``stack.pop()``, a list in a config dict): they were neither guarded nor written back,
    so every compiled call computed with the first trace's value and left the list as that
    trace did, silently. Each call now equals eager, and so does the list after."""
    counter, nested, read, hist = [0], [[0]], [0], []
    stack, cfg = [float(i) for i in range(1, 8)], {"scales": [1.0, 2.0]}

    def f(x):
        if kind == "counter":
            counter[0] += 1
            return x * counter[0]
        if kind == "nested":
            nested[0][0] += 1
            return x * nested[0][0]
        if kind == "read":
            return x * read[0]
        if kind == "append":
            hist.append(1.5)
            return x * len(hist)
        if kind == "pop":
            return x * stack.pop()
        cfg["scales"][1] += 0.5
        return x * cfg["scales"][1]

    def state():
        return [counter[0], nested[0][0], list(hist), list(stack), list(cfg["scales"])]

    results = []
    for fn in (f, dg.compile(f)):
        counter[0], nested[0][0], read[0] = 0, 0, 0
        hist.clear()
        stack[:] = [float(i) for i in range(1, 8)]
        cfg["scales"][1] = 2.0
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (a retrace at every call: then eager)
            for i in range(6):
                read[0] = 2 * i
                out.append(fn(dg.ones(3)).sum().item())
        results.append((out, state()))
    assert results[1] == results[0]


class Listed(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = dg.nn.Linear(3, 2)
        self.scales, self.calls, self.cfg = [1.0, 2.0], [0], {"drop": [0.5]}

    def forward(self, x):
        self.calls[0] += 1
        return self.lin(x) * self.scales[1] + self.calls[0] * self.cfg["drop"][0]


@pytest.mark.parametrize("how", ["module", "function"])
def test_lists_a_module_holds_are_guarded_and_written_back(how):
    """A module's list attributes (``self.scales[1]`` changed by the caller, a ``self.calls``
    counter bumped in ``forward``, a list in a config dict): compiled calls kept the first
    trace's values, silently, as for lists a function reaches."""
    results = []
    for compiled in (False, True):
        dg.manual_seed(0)
        m = Listed()
        fn = m if not compiled else dg.compile(m) if how == "module" else dg.compile(
            lambda x: m(x))
        out = []
        with warnings.catch_warnings(), dg.no_grad():
            warnings.simplefilter("ignore")
            for i in range(5):
                if i == 2:
                    m.scales[1] = 3.0
                if i == 3:
                    m.cfg["drop"][0] = 0.25
                out.append(fn(dg.ones(4, 3)).sum().item())
        results.append(out + [m.calls[0]])
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


class Config:
    def __init__(self):
        self.scale = 2.0


class Configured(dg.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.extra = {"shift": 1.0}

    def forward(self, x):
        return x * self.config.scale + self.extra["shift"]


def test_config_objects_and_dicts_a_module_holds_are_guarded():
    m = Configured()
    c = dg.compile(m)
    x = dg.ones(3)
    assert c(x).tolist() == [3.0] * 3
    m.config.scale = 4.0            # in place: no module attribute assigned
    assert c(x).tolist() == m(x).tolist() == [5.0] * 3
    m.extra["shift"] = -1.0
    assert c(x).tolist() == m(x).tolist() == [3.0] * 3
    assert "self.config.scale changed from 2.0 to 4.0" in c.explain()
    assert "self.extra['shift'] changed from 1.0 to -1.0" in c.explain()


def test_a_config_object_argument_is_guarded_by_its_values():
    cfg = Config()
    c = dg.compile(lambda x, cfg: x * cfg.scale)
    x = dg.ones(2)
    assert c(x, cfg).tolist() == [2.0, 2.0]
    cfg.scale = 3.0   # the same object, another value
    assert c(x, cfg).tolist() == [3.0, 3.0]
    assert "cfg.scale changed from 2.0 to 3.0" in c.explain()


def test_python_random_inside_the_function_runs_its_python_every_call_not_baked():
    """Found writing a seq2seq program (tests/torch_programs/seq2seq_gru.py): teacher forcing
    drawn with ``random.random()`` inside the compiled step was baked into the trace, so
    every call took the branch of the first. Drawing from Python's or NumPy's global
    generator while tracing makes the function run its Python at every call (its ops
    compiled and replayed, as a split function's), drawing the numbers a plain eager run
    draws; not eagerly, and with no warning."""
    import random

    def f(x):
        if random.random() < 0.5:
            x = x * 2
        return x + float(np.random.uniform())

    random.seed(0)
    np.random.seed(0)
    eager = [f(dg.ones(2)).tolist() for _ in range(6)]
    random.seed(0)
    np.random.seed(0)
    c = dg.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [c(dg.ones(2)).tolist() for _ in range(6)]
    assert got == eager
    assert "random module" in c.explain() and not c.eager_only, c.explain()
    after_compiled = (random.random(), np.random.uniform())   # (the generators advanced
    random.seed(0)                                            # as eagerly)
    np.random.seed(0)
    for _ in range(6):
        f(dg.ones(2))
    assert after_compiled == (random.random(), np.random.uniform())


def test_a_module_tensor_assigned_anew_retraces():
    """A graph reads the tensors it captured by identity: a module's plain tensor attribute
    or buffer assigned a new tensor must not leave the compiled call on the old one."""
    class Masked(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = dg.nn.Linear(3, 3)
            self.mask = dg.ones(3)
            self.register_buffer("shift", dg.ones(3))

        def forward(self, x):
            return self.lin(x) * self.mask + self.shift

    m = Masked()
    c = dg.compile(m)
    x = dg.randn(2, 3)
    for grad in (True, False):
        with dg.set_grad_enabled(grad):
            m.mask, m.shift = dg.ones(3), dg.ones(3)
            c(x), c(x)
            m.mask = dg.zeros(3)
            np.testing.assert_array_equal(c(x).detach().numpy(), m(x).detach().numpy())
            m.shift = dg.full((3,), 2.0)
            np.testing.assert_array_equal(c(x).detach().numpy(), m(x).detach().numpy())
    assert "self.shift was assigned anew" in c.explain()


NET = dg.nn.Linear(3, 2)


def test_a_module_or_optimiser_rebound_in_a_global_or_closure_retraces():
    """A DQN's ``target = Net()`` after loading a checkpoint, a global model replaced, a new
    optimiser given the old one's state: the graphs bound the old objects' tensors, so a
    rebinding retraces (through the fast path too) instead of using them silently."""
    global NET
    target = dg.nn.Linear(3, 1)

    def predict(x):
        with dg.no_grad():
            return target(x) + NET(x).sum(1, keepdim=True)

    c, x = dg.compile(predict), dg.randn(4, 3)
    for _ in range(3):   # (the fast path from the second call)
        np.testing.assert_allclose(c(x).numpy(), predict(x).numpy(), rtol=1e-6)
    target = dg.nn.Linear(3, 1)
    np.testing.assert_allclose(c(x).numpy(), predict(x).numpy(), rtol=1e-6)
    NET = dg.nn.Linear(3, 2)
    for _ in range(2):
        np.testing.assert_allclose(c(x).numpy(), predict(x).numpy(), rtol=1e-6)
    assert "NET, which the function reads as a global or closure variable" in c.explain()

    model = dg.nn.Linear(3, 1)
    opt = dg.optim.Adam(model.parameters(), lr=0.1)

    def step(x):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    twin = dg.nn.Linear(3, 1)
    twin.load_state_dict(model.state_dict())
    twin_opt = dg.optim.Adam(twin.parameters(), lr=0.1)
    cs = dg.compile(step)
    for i in range(6):
        if i == 3:   # a fresh optimiser: its own (empty) state, as eager's
            opt = dg.optim.Adam(model.parameters(), lr=0.1)
            twin_opt = dg.optim.Adam(twin.parameters(), lr=0.1)
        got = cs(x)
        twin_opt.zero_grad()
        want = twin(x).pow(2).mean()
        want.backward()
        twin_opt.step()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)


HEADS = [dg.nn.Linear(3, 2), dg.nn.Linear(3, 2)]


class _Config:
    pass


def test_a_module_replaced_in_a_container_retraces():
    """A module held in a global list, a closure's dict or a plain object's attribute and
    replaced there between calls (``heads[0] = Net()``): the graphs bound the old module's
    parameters, so the call traces anew instead of serving them silently; and a module so
    held switched to eval mode is seen as a module read directly is."""
    nets, cfg = {"enc": dg.nn.Linear(3, 2)}, _Config()
    cfg.drop = dg.nn.Sequential(dg.nn.Linear(3, 2), dg.nn.Dropout(0.5))

    def f(x):
        return HEADS[0](x) + nets["enc"](x) + cfg.drop(x)

    c, x = dg.compile(dg.no_grad()(f)), dg.randn(4, 3)
    cfg.drop.eval()
    for change in [None, lambda: HEADS.__setitem__(0, dg.nn.Linear(3, 2)),
                   lambda: nets.update(enc=dg.nn.Linear(3, 2)),
                   lambda: setattr(cfg, "drop", dg.nn.Linear(3, 2))]:
        if change is not None:
            change()
        for _ in range(2):   # (the second call through the fast path)
            np.testing.assert_allclose(c(x).numpy(), f(x).detach().numpy(), rtol=1e-6)
    assert "cfg.drop, which the function reads" in c.explain()
    cfg.drop = dg.nn.Sequential(dg.nn.Linear(3, 2), dg.nn.Dropout(0.9))
    cfg.drop.eval()
    np.testing.assert_allclose(c(x).numpy(), f(x).detach().numpy(), rtol=1e-6)
    cfg.drop.train()   # (most of cfg.drop's outputs dropped)
    with dg.no_grad():
        rest = (HEADS[0](x) + nets["enc"](x)).numpy()
    assert np.isclose(c(x).numpy(), rest).mean() > 0.5


def test_a_decorated_function_guards_what_the_function_it_wraps_reads():
    """``torch.compile`` over a ``@torch.no_grad()`` function (an evaluation loop's idiom):
    the modules the wrapped function reads are found through ``__wrapped__``, so a module
    switched to eval mode or rebound is seen (the wrapper's own code names none)."""
    net = dg.nn.Sequential(dg.nn.Linear(3, 2), dg.nn.Dropout(0.9))

    @dg.no_grad()
    def evaluate(x):
        return net(x)

    c, x = dg.compile(evaluate), dg.randn(4, 3)
    net.eval()
    np.testing.assert_allclose(c(x).numpy(), evaluate(x).numpy(), rtol=1e-6)
    net.train()   # (most outputs dropped now)
    assert (c(x) == 0).float().mean().item() > 0.5
    net = dg.nn.Linear(3, 2)
    np.testing.assert_allclose(c(x).numpy(), evaluate(x).numpy(), rtol=1e-6)


def test_a_module_rebound_at_every_call_runs_eagerly_after_the_limit():
    box = dg.nn.Linear(2, 2)

    def f(x):
        return box(x)

    c, x = dg.compile(f), dg.randn(1, 2)
    c.retrace_limit = 2
    with pytest.warns(UserWarning, match="box rebound 3 times"):
        for _ in range(4):
            box = dg.nn.Linear(2, 2)
            np.testing.assert_allclose(c(x).detach().numpy(), f(x).detach().numpy(),
                                       rtol=1e-6)
    assert c.records[-1].kind == "limit"


class Doubler(dg.nn.Module):
    def forward(self, x):
        return 2 * x


def test_a_module_class_the_function_names_is_no_module_of_its_scope():
    """``isinstance(m, Doubler)`` or ``Doubler()`` in a compiled step names the class: it
    is not taken for a module instance (whose submodules would be listed, a TypeError)."""
    m = Doubler()

    def f(x):
        return m(x) if isinstance(m, Doubler) else Doubler()(x) + 1

    c, x = dg.compile(f), dg.randn(3)
    np.testing.assert_allclose(c(x).numpy(), f(x).numpy())


@pytest.mark.parametrize("how", ["requires_grad_", "attribute"])
def test_freezing_a_layer_mid_training_retraces(how):
    """Fine-tuning freezes the first layer after a few steps (``p.requires_grad = False``):
    the compiled step stops computing its gradients and the optimiser stops moving it, as
    eagerly (a parameter's requires_grad is guarded)."""
    def run(compiled):
        dg.manual_seed(0)
        m = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 2))
        opt = dg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            loss = m(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        c = dg.compile(step) if compiled else step
        out = []
        for i in range(5):
            if i == 2:
                for p in m[0].parameters():
                    if how == "attribute":
                        p.requires_grad = False
                    else:
                        p.requires_grad_(False)
            out.append(c(dg.tensor(np.full((3, 4), 0.1 * (i + 1), np.float32))).item())
        return out + m[0].weight.detach().numpy().ravel().tolist(), c

    want, _ = run(False)
    got, c = run(True)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "a parameter's requires_grad changed" in c.explain()


@pytest.mark.parametrize("compile_model", [False, True])
def test_a_hook_registered_or_removed_after_compiling_retraces(compile_model):
    """A forward hook or pre-hook added after the first compiled call (or removed) changes
    what the module computes: guarded by the hooks' handles, as torch.compile does."""
    def run(compiled):
        dg.manual_seed(0)
        m = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 2))
        c = dg.compile(m) if compiled and compile_model else m

        def f(x):
            return c(x).sum()

        g = dg.compile(f) if compiled and not compile_model else f
        x, out = dg.ones(3, 4), []
        out += [g(x).item(), g(x).item()]
        handle = m[0].register_forward_hook(lambda mod, args, o: o * 2)
        out += [g(x).item(), g(x).item()]
        handle.remove()
        out.append(g(x).item())
        with m[2].register_forward_pre_hook(lambda mod, args: (args[0] + 1,)):
            out.append(g(x).item())
        out.append(g(x).item())
        return out, g if compiled and not compile_model else c

    want, _ = run(False)
    got, c = run(True)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "a module's hook was registered or removed" in c.explain()


@pytest.mark.parametrize("how", ["method", "attribute", "method, then a break",
                                 "method, after the use"])
def test_requires_grad_set_inside_the_function_is_set_at_every_call(how):
    """``self.g.requires_grad_(not self.g.requires_grad)`` (or ``= ...``) in a compiled
    forward: the graph does not set the flag, so a graph traced with it on served the next
    call too (the flag stayed on, and gradients came at the wrong calls: the torch-API
    generator, i-gen4). Now the function's Python runs at every call; a trace aborted at a
    later break puts the flag back before the eager run sets it; ops that read ``g`` before
    it was turned off give results that require grad (stateful seed 7198)."""
    class Net(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.g = dg.nn.Parameter(dg.ones(3, dtype=dg.float64))

        def forward(self, x):
            y = x * self.g if how.endswith("use") else None
            if how == "attribute":
                self.g.requires_grad = not self.g.requires_grad
            else:
                self.g.requires_grad_(not self.g.requires_grad)
            y = x * self.g if y is None else y   # (after the use: y requires grad, as
            # eagerly, from the g that did; g gets no gradient: torch's AccumulateGrad)
            if how.endswith("break") and y.sum().item() > 0:
                y = y * 2.0
            return y

    seen = []
    for compiled in (False, True):
        net = Net()
        fn = dg.compile(net) if compiled else net
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for n in (5, 4, 5, 4, 5, 4):
                net.g.grad = None
                x = dg.tensor(np.arange(n * 3.0).reshape(n, 3),
                              requires_grad=not how.endswith("use"))
                y = fn(x)
                if y.requires_grad:
                    y.sum().backward()
                out.append((net.g.requires_grad, None if net.g.grad is None
                            else net.g.grad.numpy().tolist(), y.detach().numpy().tolist(),
                            y.requires_grad, None if x.grad is None else x.grad.numpy().tolist()))
        seen.append(out)
    assert seen[1] == seen[0]
    assert [flag for flag, *_ in seen[0]] == [False, True] * 3


@pytest.mark.parametrize("backward_inside", [False, True])
def test_requires_grad_of_the_argument_set_inside_the_step_is_set_at_every_call(
        backward_inside):
    """``x.requires_grad_()`` of the step's own argument: a graph traced with it set
    served the next calls without setting it (x kept requires_grad False, got no gradient:
    a silent difference, found in i-gen5). (A loss the step's own backward used is returned
    without history compiled: docs/capture.md.)"""
    def step(x, w):
        y = (x * w).tanh()
        x.requires_grad_()
        z = (x * y).sin().sum()
        if backward_inside:
            z.backward()
        return z

    seen = []
    for fn in (step, dg.compile(step)):
        out = []
        for n in (3, 3, 4, 3):
            x = dg.tensor(np.arange(n, dtype=np.float32) / 3)
            z = fn(x, dg.full((n,), 0.7))
            if not backward_inside:
                z.backward()
            out.append((x.requires_grad, z.requires_grad or backward_inside, round(z.item(), 6),
                        None if x.grad is None else np.round(x.grad.numpy(), 6).tolist()))
        seen.append(out)
    assert seen[1] == seen[0] and all(o[0] and o[3] for o in seen[0])


def test_a_step_that_freezes_a_layer_at_each_call_compiles_after_the_first():
    """``requires_grad_(False)`` of a layer's parameters in the step, the same at every
    call: the first trace finds the flags changed, runs that call's Python, and the next
    traces one graph with them off (not Python at every call)."""
    def run(compiled):
        dg.manual_seed(0)
        net = dg.nn.Sequential(dg.nn.Linear(3, 3), dg.nn.Linear(3, 1))

        def step(x):
            for p in net[0].parameters():
                p.requires_grad_(False)
            loss = net(x).sum()
            loss.backward()
            return loss

        fn = dg.compile(step) if compiled else step
        for k in range(4):
            x = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / (k + 1))
            net.zero_grad()
            loss = fn(x)
        return fn, [loss.item(), net[0].weight.grad, net[1].weight.grad.numpy().tolist()]

    _, want = run(False)
    fn, got = run(True)
    assert got == want and got[1] is None
    kinds = [r.kind for r in fn.records]
    assert kinds.count("python") == 1 and kinds.count("capture") == 1, fn.explain()
    assert fn.explain().count("runs at this call, and the next traces again") == 1


@pytest.mark.parametrize("why", ["toggle", "print"])
@pytest.mark.parametrize("passed", [False, True])
def test_an_aborted_trace_leaves_no_optimiser_state(why, passed):
    """A trace aborted for Python at every call (a requires_grad toggle, a print) made
    SGD's momentum buffer as zeros and left it: the eager run of that call then dampened
    it as a later step (torch-API seed 5701 of i-gen5: SGD with dampening=0.1)."""
    def run(compiled):
        dg.manual_seed(0)
        lin = dg.nn.Linear(3, 2).double()
        g = dg.nn.Parameter(dg.ones(3, dtype=dg.float64))
        opt = dg.optim.SGD(list(lin.parameters()) + [g], lr=0.1, momentum=0.9, dampening=0.1)

        def step(x, o):   # (the optimiser an argument, or found in the step's scope)
            o = o if passed else opt
            o.zero_grad()
            if why == "toggle":
                g.requires_grad_(not g.requires_grad)
            else:
                print(x.shape[0], file=io.StringIO())
            lin(x * g).pow(2).sum().backward()
            o.step()

        f = dg.compile(step) if compiled else step
        for k in range(3):
            f(dg.tensor(np.arange(6.0).reshape(2, 3) / (k + 1)), opt if passed else None)
        return lin.bias.detach().numpy().tolist() + lin.weight.detach().numpy().ravel().tolist()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(run(True), run(False), rtol=1e-12)


@pytest.mark.parametrize("sigmoid", [False, True])
def test_a_leaf_whose_requires_grad_is_turned_off_before_the_backward_gets_none(sigmoid):
    """``y = x * w``, then ``w.requires_grad_(False)`` and ``y.sum().backward()`` inside the
    step: ``w`` gets no gradient (torch's AccumulateGrad skips a leaf that no longer requires
    grad); the traced backward accumulated into it through its traced stand-in, which still
    required grad (stateful seed 6633), and eager did through ``sigmoid`` (seed 6935)."""
    def run(compiled):
        w = dg.tensor(np.arange(3.0), requires_grad=True)

        def step(x):
            y = x * (w.sigmoid() if sigmoid else w)
            w.requires_grad_(not w.requires_grad)
            y.sum().backward()
            return y.detach()

        fn = dg.compile(step) if compiled else step
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(4):
                x = dg.tensor(np.ones(3) * (k + 1), requires_grad=True)
                y = fn(x)
                seen.append((w.requires_grad, w.grad is None, x.grad.numpy().tolist(),
                             y.numpy().tolist()))
        return seen

    assert run(True) == run(False)
    assert all(none for _, none, *_ in run(False))


def test_requires_grad_of_a_tensor_held_outside_modules_is_guarded():
    """``S.extra`` (a leaf on a plain object) read by the step, its ``requires_grad`` turned
    off between calls: the graph traced while it required grad went on writing its
    gradient (stateful seed 7775, silent); the flag is guarded now, as a parameter's is."""
    def world():
        S = type("State", (), {})()
        S.extra = dg.tensor(np.arange(3.0), requires_grad=True)

        def step(x):
            h = dg.maximum(x, S.extra)
            (h * h).sum().backward()
            return h.detach()
        return S, step

    runs = []
    for compiled in (False, True):
        S, step = world()
        fn = dg.compile(step) if compiled else step
        seen = []
        for k, flag in enumerate([True, True, False, False, True]):
            S.extra.requires_grad_(flag)
            x = dg.tensor(np.ones(3) * k, requires_grad=True)
            seen.append((fn(x).numpy().tolist(), x.grad.numpy().tolist(),
                         None if S.extra.grad is None else S.extra.grad.numpy().tolist()))
        runs.append(seen)
    assert runs[1] == runs[0]
