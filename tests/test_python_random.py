"""Python-level random numbers drawn inside a compiled function (capture/pyrandom.py):
Python's ``random``, NumPy's global generator and generator objects of the user's. A trace
would bake the numbers drawn into the graph, so the function runs its Python at every call
(its ops compiled and replayed): every call draws what eager draws, the generators advance
exactly as eagerly, and the step is not sent to eager."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
from dualgraph.capture import split

CALLS = 14


@pytest.fixture(autouse=True)
def split_kept(monkeypatch):
    monkeypatch.setattr(split, "COMPARE_AFTER", float("inf"))


def generator(source: str):
    """``draw()`` -> a float in [0, 1) from ``source``, seeded."""
    random.seed(3)
    np.random.seed(3)
    if source == "random module":
        return random.random
    if source == "numpy global":
        return np.random.uniform
    if source == "random.Random":
        return random.Random(3).random
    if source == "numpy Generator":
        return np.random.default_rng(3).random
    return np.random.RandomState(3).rand


def run(source, use, compiled, brk=False):
    """A training step whose draw picks a branch, a choice or a scale; its losses and
    parameters, the next draw after the calls, and the compiled function."""
    draw = generator(source)
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = dg.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        h = model(x)
        if brk:
            print(f"{h.sum().item():.3f}", file=open("/dev/null", "w"))
        u = draw()
        if use == "branch":        # (teacher forcing)
            if u < 0.5:
                h = h * 2
        elif use == "choice":      # (random.choice of a scale)
            h = h * [0.5, 1.0, 2.0][int(u * 3)]
        else:                      # (a scale drawn every call)
            h = h * (0.5 + u)
        loss = nn.functional.mse_loss(h, y)
        loss.backward()
        opt.step()
        return loss.detach()

    fn = dg.compile(step) if compiled else step
    outs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(CALLS):
            x = dg.tensor(np.full((3, 4), 0.1 * (i + 1), np.float32))
            outs.append(fn(x, dg.zeros(3, 2)).numpy().copy())
    outs += [p.detach().numpy().copy() for p in model.parameters()]
    return outs, draw(), fn


SOURCES = ("random module", "numpy global", "random.Random", "numpy Generator",
           "numpy RandomState")


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("use", ["branch", "choice", "scale"])
@pytest.mark.parametrize("brk", [False, True])
def test_drawn_values_are_eagers_at_every_call(source, use, brk):
    want, next_e, _ = run(source, use, False, brk)
    got, next_c, fn = run(source, use, True, brk)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert next_c == next_e   # (the generator advanced as eagerly, draw for draw)
    if use != "scale":   # (a scale drawn every call makes a new last piece every call:
        # eager after RETRACE_LIMIT of them, with a warning; a branch or choice does not)
        assert not fn.eager_only and fn._split is not None, fn.explain()


def test_explain_names_the_generator_and_the_fix():
    _, _, fn = run("random.Random", "branch", True)
    report = fn.explain()
    assert "generator object" in report and "Python runs at every call" in report
    assert "pass them in" in report


@pytest.mark.parametrize("opt", ["ASGD", "NAdam", "Adam"])
def test_optimiser_state_made_in_the_first_call_is_kept(opt):
    """An AWD-LSTM-style step drawing its DropConnect masks from a NumPy generator (so its
    Python runs at every call) with ASGD, whose ``eta`` and ``mu`` state started as a
    fresh counter written in place (``step_counter().add_(lr)``): the compiled call lost
    that write and took its first step with ``eta = 0``, one step behind eager from then
    on (NAdam's ``mu_product`` alike). They are made with their first values now."""
    def make():
        dg.manual_seed(0)
        model = nn.Linear(3, 1)
        optim = getattr(dg.optim, opt)(model.parameters(), lr=0.5)
        rng = np.random.default_rng(0)

        def step(x):
            keep = dg.from_numpy((rng.random(3) >= 0.2).astype(np.float32))
            loss = model(x * keep).pow(2).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
            return loss
        return step

    x, eager, compiled = dg.randn(4, 3), make(), dg.compile(make())
    for _ in range(4):
        np.testing.assert_allclose(compiled(x).item(), eager(x).item(), rtol=1e-5)


MASK_RNG = np.random.default_rng(5)


def _keep_mask(x, keep):
    """A per-sample keep mask drawn from a module-level generator (timm's ``drop_path``
    written with NumPy draws): no attribute of the model names the generator."""
    drawn = (MASK_RNG.random((x.shape[0], 1)) < keep).astype(np.float32)
    return dg.from_numpy(drawn) / keep


class _DropPath(nn.Module):
    def forward(self, x):
        return x * _keep_mask(x, 0.5)


@pytest.mark.parametrize("what", ["module", "step"])
def test_a_generator_only_a_forward_helper_names_is_seen(what):
    """The generator is reached through the module class's forward and the helper it
    calls (their globals), not through the model's attributes: it was not, and the
    compiled calls repeated the first trace's mask (a silent difference)."""
    model = nn.Sequential(nn.Linear(3, 3), _DropPath())
    x = dg.ones(6, 3)

    def run(fn):
        MASK_RNG.bit_generator.state = np.random.default_rng(5).bit_generator.state
        return [fn(x).detach().numpy() for _ in range(6)]

    eager = run(model)
    compiled = dg.compile(model) if what == "module" else dg.compile(lambda t: model(t) * 2)
    got = run(compiled)
    for e, g in zip(eager, got):
        np.testing.assert_allclose(g, e * (2 if what == "step" else 1), rtol=1e-6)


def test_a_refused_trace_does_not_draw_before_the_eager_run():
    """A split call's trace drew from the user's generator, was then refused (an in-place
    write giving an argument history) and the call ran eagerly, drawing again: the
    generator was one number ahead of eager's and the result scaled by the wrong draw.
    Now every trace notes and puts back every generator, as an unsplit trace does."""
    def make():
        rng = random.Random(5)

        def step(x, y):
            s = 1.0 + rng.random()
            x.mul_(y)
            return (x * s).sum()
        return step, rng

    eager, eager_rng = make()
    compiled, compiled_rng = make()
    compiled = dg.compile(compiled)
    for k, grad in enumerate((False, False, True, False)):
        results = []
        for fn in (eager, compiled):
            x = dg.tensor(np.arange(3.0) + k) * 1.0
            y = dg.tensor(np.full(3, 2.0), requires_grad=grad)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results.append(fn(x, y).item())
        assert results[1] == results[0], f"call {k}"
        assert compiled_rng.getstate() == eager_rng.getstate(), f"call {k}"
