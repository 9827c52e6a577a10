"""Eager ops recycle the big arrays of dead results (kernels/recycle.py, the ``recycle``
trick of the tuning switch, on by default): an array is handed back only when nothing but
the recycler references it, so no value anyone can see ever changes, and results are the
same bits as without recycling."""
from __future__ import annotations

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F
from dualgraph.kernels import recycle, tuning

ROWS, COLS = 512, 256     # 512 KiB of float32: above recycle.MIN_BYTES


@pytest.fixture
def recycler():
    """A fresh recycler for the test (the tuning switch's own, put back after)."""
    before = recycle.current
    recycle.current = recycle.Recycler()
    yield recycle.current
    recycle.current = before


def address(t) -> int:
    return t.numpy().__array_interface__["data"][0]


def big(seed=0):
    return dg.tensor(np.random.default_rng(seed).standard_normal((ROWS, COLS), np.float32))


def test_a_dead_result_is_reused_by_the_next_op_of_its_shape(recycler):
    x, w = big(0), big(1)[:COLS]
    y = x @ w
    where = address(y)
    del y
    z = x @ w
    assert address(z) == where and recycler.reused == 1
    np.testing.assert_array_equal(z.numpy(), x.numpy() @ w.numpy())


@pytest.mark.parametrize("holder", ["tensor", "view", "numpy", "saved", "list"])
def test_a_result_anyone_still_holds_is_never_overwritten(recycler, holder):
    x = big(0).requires_grad_(holder == "saved")
    w = big(1)[:COLS]
    y = F.gelu(x @ w)
    want = y.detach().numpy().copy()
    kept = {"tensor": lambda: y, "view": lambda: y[3:7], "numpy": lambda: y.detach().numpy(),
            "saved": lambda: (y * 2).sum(), "list": lambda: [y]}[holder]()
    if holder != "tensor":
        del y
    for seed in range(3):   # ops of the same shape, which would take a free array
        F.gelu(big(seed + 5) @ w)
    assert recycler.reused > 0    # (the loop's own dead results were taken)
    if holder == "saved":
        kept.backward()     # gelu's backward reads the saved input; x @ w's its operands
        assert x.grad is not None and np.isfinite(x.grad.numpy()).all()
    elif holder == "view":
        np.testing.assert_array_equal(kept.numpy(), want[3:7])
    else:
        got = kept[0] if holder == "list" else kept
        np.testing.assert_array_equal(np.asarray(getattr(got, "detach", lambda: got)()), want)


def test_training_steps_give_the_same_bits_with_and_without_recycling():
    def train(tricks):
        before = tuning.configure(tricks)
        try:
            dg.manual_seed(0)
            model = nn.Sequential(nn.Linear(COLS, 512), nn.GELU(), nn.LayerNorm(512),
                                  nn.Linear(512, 10))
            opt = dg.optim.Adam(model.parameters(), lr=1e-3)
            x = big(3)
            y = dg.tensor(np.arange(ROWS) % 10)
            losses = []
            for _ in range(4):
                opt.zero_grad()
                loss = F.cross_entropy(F.softmax(model(x), -1) * 3, y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            return losses, [p.detach().numpy().copy() for p in model.parameters()]
        finally:
            tuning.configure(before)

    with_losses, with_params = train("blas,matvec,recycle")
    reused = recycle.current.reused if recycle.current else 0
    without_losses, without_params = train("blas,matvec")
    assert with_losses == without_losses
    for a, b in zip(with_params, without_params):
        np.testing.assert_array_equal(a, b)
    assert reused > 0, "the steps recycled nothing"


def test_a_loop_over_slices_gives_the_same_gradient_with_and_without_recycling(recycler):
    """x[:, t] in a Python loop, forward and backward, with 512 KB steps: dead arrays are
    handed out again (the slices' own gradients no longer need it: they go into one array,
    engine._add_block), and the gradient is the one computed without the recycler."""
    def grad():
        x = dg.tensor(np.random.default_rng(4).standard_normal((64, 16, 2048), np.float32),
                      requires_grad=True)
        w = dg.tensor(np.random.default_rng(5).standard_normal((64, 2048), np.float32))
        loss = sum(((x[:, t] * w).tanh() * (t + 1)).sum() for t in range(16))
        loss = loss + sum((part * 0.5).sum() for part in x.split(5, dim=2))
        loss.backward()
        return x.grad.numpy().copy()
    got = grad()
    assert recycler.reused > 0
    recycle.current = None
    np.testing.assert_array_equal(got, grad())


def test_the_switch_turns_it_off_and_release_frees_what_is_kept(recycler):
    x, w = big(0), big(1)[:COLS]
    x @ w      # (dropped at once: free, kept)
    assert recycler.held >= ROWS * COLS * 4
    assert recycler.release() >= ROWS * COLS * 4 and recycler.held == 0
    before = tuning.configure("blas,matvec")
    try:
        assert recycle.current is None
    finally:
        tuning.configure(before)


def test_small_arrays_views_and_foreign_arrays_are_not_kept(recycler):
    recycler.keep(np.ones(10, np.float32))                      # small
    recycler.keep(np.ones((ROWS, COLS), np.float32)[:, ::2])    # a view
    frozen = np.ones((ROWS, COLS), np.float32)
    frozen.flags.writeable = False
    recycler.keep(frozen)
    assert recycler.held == 0 and not recycler.blocks


def test_caps_per_shape_and_in_bytes(recycler, monkeypatch):
    alive = [np.ones((ROWS, COLS), np.float32) for _ in range(recycle.PER_SHAPE + 2)]
    for a in alive:
        recycler.keep(a)
    assert len(recycler.blocks[(ROWS, COLS), np.dtype(np.float32)]) == recycle.PER_SHAPE
    del alive    # all free now: a new array replaces them
    fresh = np.ones((ROWS, COLS), np.float32)
    recycler.keep(fresh)
    assert recycler.blocks[(ROWS, COLS), np.dtype(np.float32)] == [fresh]
    monkeypatch.setattr(recycle, "CAP_BYTES", fresh.nbytes)
    other = np.ones((ROWS * 2, COLS), np.float32)
    recycler.keep(other)     # over the cap while `fresh` is in use: not kept
    assert recycler.held == fresh.nbytes


def test_over_the_cap_free_arrays_of_other_shapes_are_swept_seldom(recycler, monkeypatch):
    """Past the cap, the first keep drops every shape's free arrays (a dead one of another
    shape makes room), then only one keep in SWEEP_EVERY looks again: a program holding the
    cap in live results does not scan them all at every big op."""
    monkeypatch.setattr(recycle, "CAP_BYTES", ROWS * COLS * 4)
    recycler.keep(np.ones((ROWS, COLS), np.float32))       # dead at once: free
    live = np.ones((COLS, ROWS), np.float32)
    recycler.keep(live)                                    # over the cap: the sweep drops it
    assert list(recycler.blocks) == [((COLS, ROWS), np.dtype(np.float32))]
    sweeps = []
    real = recycler._drop_free
    monkeypatch.setattr(recycler, "_drop_free", lambda key: (sweeps.append(key), real(key)))
    others = [np.ones((ROWS + 1, COLS), np.float32) for _ in range(2 * recycle.SWEEP_EVERY)]
    for a in others:
        recycler.keep(a)                                   # never room: `live` is alive
    assert sweeps == [None, None] and recycler.held == live.nbytes
