"""Tensors a compiled step makes and keeps in Python state, read at a later call.

A split call replays the call before (capture/replay.py): its ops' outputs are the tape's
Values, the same objects at every call. A tensor kept where the walk for kept state does
not look (a helper's global, a closure cell, a default argument, a registry object, deeper
than the walk goes, a container too long to walk) holds such a Value after its call; read
by a later call it must never be taken for that call's value of the same op: the call
gives eager's values or raises StaleTensorError naming the line that read it.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
from dualgraph.capture import split
from dualgraph.capture.trace import StaleTensorError

CALLS = 12

_KEPT: list = []   # a global of the helpers below, not of the steps


def _keep_in_global(t):
    _KEPT.append(t)


def _fetch_from_global(k):
    return _KEPT[k]


class _Registry:
    """A module-level registry object the steps reach only through functions."""

    def __init__(self):
        self.items = {}


_REGISTRY = _Registry()


def _register(t):
    _REGISTRY.items[len(_REGISTRY.items)] = t


def _registered(k):
    return _REGISTRY.items[k]


class _Nest:
    """An object chain deeper than the walk for kept state goes."""

    def __init__(self, depth):
        self.inner = _Nest(depth - 1) if depth else None
        self.kept = []


def place(kind: str):
    """``(keep(t), fetch(k))`` for a hiding place, fresh for each run; and the objects the
    step names (a closure variable) to reach it."""
    if kind == "helper global":
        _KEPT.clear()
        return _keep_in_global, _fetch_from_global
    if kind == "registry":
        _REGISTRY.items.clear()
        return _register, _registered
    if kind == "closure cell":
        store = []
        return store.append, store.__getitem__   # (builtin methods: opaque to the walk)
    if kind == "default argument":
        def keep(t, _store=[]):
            _store.append(t)

        def fetch(k, _store=keep.__defaults__[0]):
            return _store[k]
        return keep, fetch
    if kind == "deep":
        nest = _Nest(8)
        bottom = nest
        while bottom.inner is not None:
            bottom = bottom.inner
        return (lambda t: bottom.kept.append(t)), (lambda k: bottom.kept[k])
    if kind == "long list":
        big = [None] * 10_001
        count = [0]

        def keep(t):
            big[count[0]] = t
            count[0] += 1
        return keep, big.__getitem__
    raise ValueError(kind)


PLACES = ("helper global", "registry", "closure cell", "default argument", "deep",
          "long list")


def run(kind, lag, first_read, where, compiled):
    """Per call, its output (or the error it raised, then stop)."""
    keep, fetch = place(kind)
    dg.manual_seed(0)
    layer = nn.Linear(3, 3)
    calls = [0]

    def step(x):
        calls[0] += 1
        h = layer(x).tanh()
        if where == "before":
            keep(h * 2)
        if h.sum().item() > 100:   # (a graph break: the step is split here)
            h = h * 0
        if where == "after":
            keep(h * 3)
        out = h + 1
        if calls[0] >= first_read:
            out = out + fetch(calls[0] - 1 - lag)   # MARK-read
        return out.detach()

    fn = dg.compile(step) if compiled else step
    outs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(CALLS):
            x = dg.tensor(np.full((2, 3), 0.1 * (i + 1), np.float32))
            try:
                outs.append(fn(x).numpy().copy())
            except StaleTensorError as e:
                outs.append(e)
                break
    return outs


@pytest.fixture(autouse=True)
def split_kept(monkeypatch):
    monkeypatch.setattr(split, "COMPARE_AFTER", float("inf"))


@pytest.mark.parametrize("kind", PLACES)
@pytest.mark.parametrize("lag", [1, 2, 5])
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("replayed", [True, False])
def test_a_tensor_kept_out_of_sight_is_eagers_or_an_error(kind, lag, where, replayed):
    """Read ``lag`` calls after it was made, by a replayed call (from call 8: the tape has
    settled) or by the first calls (traced): eager's value, or StaleTensorError at the
    line that read it; never another call's value of the same op."""
    first_read = 8 if replayed else lag + 1
    want = run(kind, lag, first_read, where, False)
    got = run(kind, lag, first_read, where, True)
    for call, (a, b) in enumerate(zip(got, want)):
        if isinstance(a, Exception):
            assert call + 1 >= first_read, a
            assert "MARK-read" in open(__file__).read().splitlines()[
                int(a.location.rsplit(":", 1)[1]) - 1], a.location
            assert "another capture" in str(a)
            break
        np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=f"call {call + 1}")
    else:
        assert len(got) == len(want) == CALLS


def test_the_error_names_the_line_and_the_fix():
    """The error of a stale read says what happened and where to keep the tensor."""
    got = run("closure cell", 1, 8, "after", True)
    error = got[-1]
    assert isinstance(error, StaleTensorError), got
    assert error.location.startswith(__file__.rsplit("/", 1)[-1]) or __file__ in \
        error.location or "test_kept_tensors.py" in error.location
    assert "module attribute" in error.fix and "return them" in error.fix


def kept_every_call(kind: str, compiled: bool, calls: int = 12):
    """A training step that keeps a tensor it makes in Python state at every call: its
    losses, parameters and every kept tensor, and the compiled function."""
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    history, feats = [], {}
    grad_log, grad_last = [], {}   # (reached only through the hooks of parameters)
    if kind == "gradient hook history":   # (gradient norms logged as backward runs)
        model[2].weight.register_hook(lambda g: grad_log.append(g.norm()))
    if kind == "gradient hook dict item":
        model[0].bias.register_post_accumulate_grad_hook(
            lambda p: grad_last.__setitem__("bias", p.grad * 1))
    if kind == "hook attribute":   # (feature extraction: the module keeps its output)
        model[1].register_forward_hook(lambda m, i, o: setattr(m, "act", o.detach()))
    if kind == "hook dict read by the loss":   # (a perceptual loss)
        model[1].register_forward_hook(lambda m, i, o: feats.__setitem__("act", o))

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        if kind == "hook dict read by the loss":
            loss = loss + 0.01 * feats["act"].pow(2).mean()
        if kind == "previous call's, read":
            if hasattr(model, "previous"):
                loss = loss + 0.1 * (model.previous * loss).mean()
            model.previous = loss.detach()
        loss.backward()
        opt.step()
        if kind == "history":
            history.append(loss.detach())
        if kind == "dict item":
            feats["loss"] = loss.detach() * 2
        return loss.detach()

    fn = dg.compile(step) if compiled else step
    rng = np.random.default_rng(0)
    losses, held = [], []   # (held: what the caller takes out after each call, kept)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (no graph break, no fallback)
        for _ in range(calls):
            x = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
            losses.append(fn(x, dg.zeros(5, 2)).numpy().copy())
            held += [t for t in (getattr(model[1], "act", None), feats.get("loss"))
                     if t is not None]
    losses += [t.numpy().copy() for t in held]   # (each its own call's value, at the end)
    kept = [t.numpy().copy() for t in history]
    kept += [getattr(m, name).numpy().copy() for m, name in ((model[1], "act"),
                                                             (model, "previous"))
             if hasattr(m, name)]
    kept += [t.detach().numpy().copy() for t in [*feats.values(), *grad_log,
                                                  *grad_last.values()]]
    return losses + [p.detach().numpy().copy() for p in model.parameters()] + kept, fn


@pytest.mark.parametrize("kind", ["history", "hook attribute", "hook dict read by the loss",
                                  "previous call's, read", "dict item",
                                  "gradient hook history", "gradient hook dict item"])
def test_a_step_keeping_a_tensor_every_call_stays_compiled_and_equal(kind):
    """``history.append(loss.detach())``, a hook's ``self.act = out.detach()``: after three
    calls that each made the state, a step that replaces a tensor in a dict item or an
    attribute is one graph that stores a new tensor there after each run (one with history
    as its value, the step's backward being in the graph; the one before, read, is read
    from that place); a list it grows runs its Python at every call (so what it keeps,
    and when, is eager's) with its ops compiled and replayed. Never eagerly. Containers
    reached only by a parameter's gradient hooks too (``p.register_hook(lambda g:
    log.append(g.norm()))``: they kept the trace's symbolic values, one per trace)."""
    want, _ = kept_every_call(kind, False)
    got, fn = kept_every_call(kind, True)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not fn.eager_only, fn.explain()
    if "history" not in kind:
        assert fn._split is None and "stores a new tensor there" in fn.explain()
        assert len(fn.records) == 4, fn.explain()   # (3 captures, then no more traces)
    else:
        assert fn._split is not None and fn._split.replays >= 6, fn.explain()
        assert "Python state at every call" in fn.explain()


def test_a_history_longer_than_the_walk_goes_keeps_real_tensors(monkeypatch):
    """The walk for kept state looks at a long list's latest items (where ``append`` puts
    them), so a history longer than MAX_ITEMS still gets a real tensor at every call."""
    from dualgraph.capture import escape
    monkeypatch.setattr(escape, "MAX_ITEMS", 4)
    want, _ = kept_every_call("history", False, calls=15)
    got, fn = kept_every_call("history", True, calls=15)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not fn.eager_only, fn.explain()


class _Masked(nn.Module):
    """Buffers that are rows of one tensor (``register_buffer("mask", masks[i])``)."""

    def __init__(self, masks):
        super().__init__()
        self.register_buffer("mask", masks)
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x * self.mask) * (1 - self.mask)


def test_buffers_that_are_stale_views_of_one_base_are_not_taken_for_new_state():
    """Loading a state dict writes each row through its own view, so the rows read by the
    trace are stale views it refreshes: they are the module's buffers, not state the call
    made. (They were taken for made state: the call re-stored them, cutting them off their
    base and bumping the shared version, and backward then refused the saved rows.)"""
    def build():
        masks = dg.zeros(3, 3)
        model = nn.Sequential(*[_Masked(masks[i]) for i in range(3)])
        rng = np.random.default_rng(0)
        model.load_state_dict({k: dg.tensor(rng.uniform(-1, 1, tuple(v.shape)).astype("f4"))
                               for k, v in model.state_dict().items()})
        return masks, model

    x = dg.tensor(np.random.default_rng(1).normal(size=(4, 3)).astype("f4"))
    results = []
    for compiled in (False, True):
        masks, model = build()
        opt = dg.optim.SGD(model.parameters(), lr=0.1)
        run = dg.compile(model) if compiled else model
        losses = []
        for _ in range(3):
            loss = run(x).square().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        masks[1].fill_(0.5)      # the buffers still show their base
        assert float(model[1].mask.sum()) == 1.5
        results.append(losses + [float(run(x).sum())])
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


@pytest.mark.parametrize("container", ["list", "dict"])
def test_a_list_or_dict_passed_in_and_filled_gets_each_calls_real_tensors(container):
    """``model(x, keep)`` appending to ``keep`` (a caller's list or dict, made anew for
    each call, as per-sample-gradient code keeps activations): every call's container gets
    that call's real tensor, as eagerly (the first compiled call left a traced value there,
    the later ones nothing: the walk for kept state did not look into arguments that are
    lists or dicts)."""
    lin = nn.Linear(4, 3)

    class Keeper(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x, keep):
            z = self.lin(x)
            if container == "list":
                keep.append(z.detach() * 2)
            else:
                keep["z"] = z.detach() * 2
            return dg.tanh(z)

    model = Keeper()
    compiled = dg.compile(model)
    rng = np.random.default_rng(0)
    for _ in range(6):
        x = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
        want, got = [] if container == "list" else {}, [] if container == "list" else {}
        model(x, want)
        out = compiled(x, got)
        assert len(got) == 1
        kept = got[0] if container == "list" else got["z"]
        np.testing.assert_allclose(kept.numpy(), (lin(x).detach() * 2).numpy(), rtol=1e-6)
        np.testing.assert_allclose(out.detach().numpy(), model(x, []).detach().numpy()
                                   if container == "list" else model(x, {}).detach().numpy(),
                                   rtol=1e-6)


def test_retain_grad_inside_a_compiled_call_is_a_graph_break_with_eagers_grad():
    """``z.retain_grad()`` inside a compiled forward kept no real gradient: its hook stored
    the backward trace's value in ``z.grad`` (a tensor whose data was not its shape's). It
    is a graph break now, naming the line, and ``z.grad`` is eager's."""
    lin = nn.Linear(4, 3)

    def forward(x, keep):
        z = lin(x)
        z.retain_grad()
        keep.append(z)
        return dg.tanh(z).sum()

    x = dg.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))
    want = []
    forward(x, want).backward()
    compiled = dg.compile(forward)
    for call in range(3):
        got = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(x, got).backward()
        if call == 0:   # (warned once, at the break)
            assert any("retain_grad" in str(w.message) for w in caught)
        np.testing.assert_allclose(got[0].grad.numpy(), want[0].grad.numpy(), rtol=1e-6)
    with pytest.raises(Exception, match=r"retain_grad\(\) on a traced tensor"):
        dg.compile(forward, fullgraph=True)(x, [])


KEPT_VIEWS = {"t": lambda h: h.t(), "rows": lambda h: h[1:], "detach": lambda h: h.detach()}


@pytest.mark.parametrize("view", list(KEPT_VIEWS))
def test_a_view_of_an_intermediate_kept_in_a_list_is_its_own_tensor_after_the_call(view):
    """``self.keep.append(h.t())`` in a compiled forward, read at the next call (whose size
    differs): the kept view still pointed at the trace's ``h`` and the next trace raised
    StaleTensorError (torch-API seed 1549: a crash where eager runs)."""
    class Net(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.keep = []

        def forward(self, x):
            h = x * 2.0
            self.keep.append(KEPT_VIEWS[view](h))
            return h + sum(t.mean() for t in self.keep[-2:]).detach()

    runs = []
    for compiled in (False, True):
        net = Net()
        fn = dg.compile(net) if compiled else net
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k, n in enumerate([5, 4, 4, 3]):
                x = dg.ones(n, 3, dtype=dg.float64, requires_grad=True) * (k + 1)
                y = fn(x)
                y.sum().backward()
                seen.append(y.detach().numpy().tolist())
        runs.append(seen + [[t.detach().numpy().tolist() for t in net.keep]])
    assert runs[1] == runs[0]
