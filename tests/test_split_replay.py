"""A split function's calls replay the call before (capture/replay.py): generated training
steps with graph breaks at varied places (prints, ``.item()`` in branches and loop counts,
NumPy on the values), Python state that changes the ops without a break, constants, and
tensors kept somewhere (where the walk for kept state looks, or out of its sight) and read
at later calls, run eagerly and compiled side by side; losses, parameters, what they
printed and their Python counters must be eager's (or, for a tensor kept out of sight and
read by a later call, StaleTensorError at that call), and the calls that do the same must
replay."""
from __future__ import annotations

import io
import random
import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F
from dualgraph.capture import split
from dualgraph.capture.trace import StaleTensorError
from test_kept_tensors import place

WIDTH, BATCH, STEPS = 6, 8, 10
# statement kinds; those marked * break the graph
GRAMMAR = ("linear", "tanh", "print*", "format*", "branch*", "loop*", "numpy*", "parity",
           "sign", "constant", "keep", "reread")
# where "keep" keeps ``h``: seen by the walk for kept state, or out of its sight
SEEN = ("module attribute", "closure dict")
HIDDEN = ("helper global", "closure cell", "default argument", "deep", "long list")


def program(seed: int) -> list:
    """A step's statements: a few kinds drawn from the grammar, at least one break."""
    rng = random.Random(seed)
    kinds = [rng.choice(GRAMMAR) for _ in range(rng.randint(3, 7))]
    if not any(k.endswith("*") for k in kinds):
        kinds.insert(rng.randrange(len(kinds) + 1), rng.choice(["print*", "branch*"]))
    return kinds


def build(kinds: list, seed: int):
    """The model, optimiser and step for ``kinds``, and what the step prints and counts."""
    dg.manual_seed(seed)
    layers = nn.ModuleList([nn.Linear(WIDTH, WIDTH) for _ in range(3)])
    head = nn.Linear(WIDTH, 2)
    params = list(layers.parameters()) + list(head.parameters())
    opt = (dg.optim.Adam(params, lr=0.01) if seed % 2 else
           dg.optim.SGD(params, lr=0.05, momentum=0.9))
    out, state = io.StringIO(), {"calls": 0, "high": 0, "kept": 0}
    where, lag, start = keeping(seed)
    head.kept, box = [], {"items": []}   # (seen: the step names them)
    keep, fetch = place(where) if where in HIDDEN else (None, None)

    def step(x, y):
        state["calls"] += 1
        opt.zero_grad()
        h = x
        for i, kind in enumerate(kinds):
            layer = layers[i % 3]
            if kind == "linear":
                h = F.relu(layer(h))
            elif kind == "tanh":
                h = dg.tanh(h) * 0.9
            elif kind == "print*":
                print("h", h.mean(), file=out)
            elif kind == "format*":
                print(f"{h.abs().sum().item():.4f}", file=out)
            elif kind == "branch*":
                if h.mean().item() > 0.0:
                    h = h * 1.5
                    state["high"] += 1
                else:
                    h = h - 0.25
            elif kind == "loop*":   # (the number of ops depends on a value)
                for _ in range(int(h.abs().mean().item() * 7) % 3 + 1):
                    h = dg.tanh(layer(h))
            elif kind == "numpy*":
                scale = np.clip(np.abs(h.detach().numpy()).mean(), 0.5, 2.0)
                h = h * dg.tensor(np.float32(scale))
            elif kind == "parity":   # (Python state changes the ops: no break)
                if state["calls"] % 2:
                    h = h * 2.0
            elif kind == "sign":     # (the same op, another literal at every other call)
                h = h * (1.0 if state["calls"] % 2 else -1.0)
            elif kind == "constant":
                h = h + dg.ones(WIDTH) * 0.1
            elif kind == "keep":
                t = h.detach() * 0.5
                if where == "module attribute":
                    head.kept.append(t)
                elif where == "closure dict":
                    box["items"].append(t)
                else:
                    keep(t)
                state["kept"] += 1
            elif kind == "reread" and state["kept"] > lag and state["calls"] > start:
                k = state["kept"] - 1 - lag
                h = h + (head.kept[k] if where == "module attribute" else
                         box["items"][k] if where == "closure dict" else fetch(k))
        loss = F.mse_loss(head(h), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step, params, out, state


def keeping(seed: int) -> tuple:
    """Where a step's "keep" keeps its tensor (seen or hidden, even odds), how many keeps
    back "reread" reads, and after which call it starts (5: in the replayed calls)."""
    rng = random.Random(seed + 1000)
    return rng.choice(rng.choice((SEEN, HIDDEN))), rng.randint(0, 2), rng.choice((0, 5))


def batches(seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [(dg.tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32)),
             dg.tensor(rng.standard_normal((BATCH, 2)).astype(np.float32)))
            for _ in range(STEPS)]


def run(kinds, seed, compiled):
    """Losses (the last one StaleTensorError, if a call raised it: then it stops),
    parameters, what the step printed, its Python counters and the function."""
    step, params, out, state = build(kinds, seed)
    fn = dg.compile(step) if compiled else step
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, y in batches(seed):
            try:
                losses.append(fn(x, y).numpy().copy())
            except StaleTensorError as e:
                losses.append(e)
                break
    return losses, [p.detach().numpy().copy() for p in params], out.getvalue(), state, fn


@pytest.fixture(autouse=True)
def split_kept(monkeypatch):
    """Split at every call (not timed against eager, which could run it eagerly)."""
    monkeypatch.setattr(split, "COMPARE_AFTER", float("inf"))


def check(kinds, seed):
    """Compiled as eager; or, for a tensor kept out of the walk's sight and read by a later
    call, eager until the call that read it raises StaleTensorError."""
    losses_e, params_e, printed_e, state_e, _ = run(kinds, seed, False)
    losses_c, params_c, printed_c, state_c, fn = run(kinds, seed, True)
    label = f"{kinds}, {keeping(seed)}"
    if isinstance(losses_c[-1], StaleTensorError):
        assert keeping(seed)[0] in HIDDEN and "reread" in kinds, label
        losses_c.pop()
        for a, b in zip(losses_c, losses_e[:len(losses_c)]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=label)
        return
    for a, b in zip(losses_c + params_c, losses_e + params_e, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=label)
    assert printed_c == printed_e and state_c == state_e, label
    assert fn._split is not None or fn.eager_only, label


@pytest.mark.parametrize("seed", range(10))
def test_generated_split_steps_match_eager(seed):
    check(program(seed), seed)


@pytest.mark.parametrize("seed", range(10))
def test_generated_steps_keeping_a_tensor_somewhere_and_reading_it_later(seed):
    """A "keep" and a "reread" in every program, in either order, the place and how many
    keeps back drawn from the seed: a tensor of the same call (read after its keep, 0
    back), of an earlier call, seen or hidden."""
    kinds = program(seed)
    rng = random.Random(seed + 2000)
    for kind in ("keep", "reread"):
        kinds.insert(rng.randrange(len(kinds) + 1), kind)
    check(kinds, seed)


def test_a_step_that_does_the_same_replays_every_call():
    """A print in the forward and nothing else that varies: after the pieces settle, every
    call replays the one before all the way (no graph built, no key computed)."""
    kinds = ["linear", "print*", "linear", "format*", "constant"]
    losses_e, params_e, printed_e, _, _ = run(kinds, 1, False)
    losses_c, params_c, printed_c, _, fn = run(kinds, 1, True)
    for a, b in zip(losses_c + params_c, losses_e + params_e, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert printed_c == printed_e
    assert fn._split.replays >= STEPS - 4, fn.explain()
    assert "calls replayed it all" in fn.explain()


def test_python_state_that_changes_the_ops_is_never_replayed_wrongly():
    """Every other call multiplies by 2 (Python state, no break) or by -1 instead of 1 (a
    literal): the replay meets another op or literal and traces on; values are eager's."""
    for kinds in (["linear", "print*", "parity", "linear"], ["print*", "sign", "linear"]):
        losses_e, params_e, *_ = run(kinds, 3, False)
        losses_c, params_c, *_, fn = run(kinds, 3, True)
        for a, b in zip(losses_c + params_c, losses_e + params_e, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=str(kinds))
        assert not fn.eager_only, fn.explain()


def test_replay_compares_literals_type_for_type():
    """What the replay takes as the tape's literal or attr: ``1``, ``1.0`` and ``True``
    differ, so do ``0.0`` and ``-0.0``; NaN is never the same; NumPy scalars and dtypes are
    normalised as a node's attrs are."""
    from dualgraph.capture.replay import same
    assert same(1.0, 1.0) and same((1, 2.5), (1, 2.5)) and same(np.float64(2.0), 2.0)
    assert not same(1, 1.0) and not same(True, 1) and not same(1.0, True)
    assert not same(-0.0, 0.0) and not same(float("nan"), float("nan"))
    assert not same((1, 2), (1, 2, 3)) and not same([1.0], [2.0])
    assert same(dg.float32, np.dtype("float32")) and same(np.float32, np.dtype("float32"))
    assert not same(dg.float64, np.dtype("float32"))
    assert same(slice(0, 3), slice(0, 3)) and not same(slice(0, 3), slice(0, 3.0))


def test_numpy_global_draws_in_split_calls_are_eagers():
    """From its third call the step adds noise drawn from NumPy's global generator, before
    and after the break: a split call takes them as constants compared by bytes (before the
    break) or as inputs (after it), never baked in, so its values are eager's draw for draw.
    """
    def run_noise(compiled):
        dg.manual_seed(0)
        np.random.seed(5)
        layer = nn.Linear(WIDTH, 2)
        out, calls = io.StringIO(), [0]

        def step(x):
            calls[0] += 1
            h = layer(x)
            if calls[0] > 2:
                h = h + dg.tensor(np.random.standard_normal(2).astype(np.float32))
            print(f"{h.sum().item():.5f}", file=out)
            if calls[0] > 2:
                h = h * dg.tensor(np.float32(np.random.uniform(0.5, 1.5)))
            return h.detach()

        fn = dg.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = [fn(x).numpy().copy() for x, _ in batches(7)]
        return values, out.getvalue(), fn

    want, printed_e, _ = run_noise(False)
    got, printed_c, fn = run_noise(True)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert printed_c == printed_e and fn._split is not None, fn.explain()
