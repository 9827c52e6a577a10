"""Learning-rate schedulers against torch: the same scheduler over the same optimiser gives
the same learning rates (and momenta, for OneCycleLR) at every step."""
import numpy as np
import pytest
import torch

import dualgraph as dg

EPOCHS = 40


def _optimizer(lib, name="SGD"):
    """Two parameter groups with different learning rates."""
    a = lib.tensor(np.ones(2, np.float32), requires_grad=True)
    b = lib.tensor(np.ones(3, np.float32), requires_grad=True)
    groups = [{"params": [a]}, {"params": [b], "lr": 0.5}]
    if name == "SGD":
        return lib.optim.SGD(groups, lr=1.0, momentum=0.9)
    return lib.optim.Adam(groups, lr=1.0)


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


def _trajectory(lib, make, epochs=EPOCHS, optimizer="SGD"):
    """The (lrs, momenta) after construction and after each of ``epochs`` steps."""
    opt = _optimizer(lib, optimizer)
    sched = make(lib.optim.lr_scheduler, opt)
    out = [(sched.get_last_lr(), _momenta(opt))]
    for _ in range(epochs):
        opt.step()
        sched.step()
        out.append((sched.get_last_lr(), _momenta(opt)))
        assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
    return out


def _seq(s, opt, parts, milestones):
    return s.SequentialLR(opt, [make(s, opt) for make in parts], milestones=milestones)


SCHEDULERS = {
    "step": lambda s, o: s.StepLR(o, step_size=7, gamma=0.5),
    "multistep": lambda s, o: s.MultiStepLR(o, milestones=[5, 12, 12, 30], gamma=0.3),
    "exponential": lambda s, o: s.ExponentialLR(o, gamma=0.9),
    "cosine": lambda s, o: s.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "cosine_odd": lambda s, o: s.CosineAnnealingLR(o, T_max=7),
    "lambda": lambda s, o: s.LambdaLR(o, lambda e: 0.95 ** e),
    "lambda_per_group": lambda s, o: s.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 0.9]),
    "multiplicative": lambda s, o: s.MultiplicativeLR(o, lambda e: 0.97),
    "linear_warmup": lambda s, o: s.LinearLR(o, start_factor=0.25, total_iters=8),
    "linear_decay": lambda s, o: s.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                            total_iters=20),
    "constant": lambda s, o: s.ConstantLR(o, factor=0.5, total_iters=4),
    "polynomial": lambda s, o: s.PolynomialLR(o, total_iters=25, power=2.0),
    "onecycle": lambda s, o: s.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=45),
    "onecycle_linear": lambda s, o: s.OneCycleLR(o, max_lr=2.0, epochs=5, steps_per_epoch=9,
                                                 anneal_strategy="linear", pct_start=0.25),
    "onecycle_three_phase": lambda s, o: s.OneCycleLR(o, max_lr=1.0, total_steps=41,
                                                      three_phase=True, div_factor=10.0),
    "onecycle_no_momentum": lambda s, o: s.OneCycleLR(o, max_lr=1.0, total_steps=40,
                                                      cycle_momentum=False),
    "sequential": lambda s, o: _seq(s, o, [
        lambda s, o: s.LinearLR(o, start_factor=0.1, total_iters=5),
        lambda s, o: s.CosineAnnealingLR(o, T_max=20)], milestones=[5]),
    "sequential3": lambda s, o: _seq(s, o, [
        lambda s, o: s.ConstantLR(o, factor=0.3, total_iters=10),
        lambda s, o: s.ExponentialLR(o, gamma=0.8),
        lambda s, o: s.StepLR(o, step_size=4, gamma=0.5)], milestones=[3, 10]),
    "sequential_closed_forms": lambda s, o: _seq(s, o, [
        lambda s, o: s.StepLR(o, step_size=2, gamma=0.9),
        lambda s, o: s.LinearLR(o, start_factor=0.5, end_factor=0.9, total_iters=4),
        lambda s, o: s.ConstantLR(o, factor=0.4, total_iters=3),
        lambda s, o: s.PolynomialLR(o, total_iters=6, power=1.5),
        lambda s, o: s.MultiStepLR(o, milestones=[26, 30], gamma=0.5)],
        milestones=[4, 10, 16, 24]),
    "cyclic": lambda s, o: s.CyclicLR(o, base_lr=0.1, max_lr=[1.0, 0.6], step_size_up=4),
    "cyclic_asymmetric_triangular2": lambda s, o: s.CyclicLR(
        o, 0.05, 0.5, step_size_up=3, step_size_down=5, mode="triangular2",
        base_momentum=0.7, max_momentum=0.95),
    "cyclic_exp_range": lambda s, o: s.CyclicLR(o, 0.1, 1.0, step_size_up=5, mode="exp_range",
                                                gamma=0.95, cycle_momentum=False),
    "cyclic_scale_fn": lambda s, o: s.CyclicLR(o, 0.1, 1.0, step_size_up=3,
                                               scale_fn=lambda x: 0.9 ** x,
                                               scale_mode="iterations"),
    "warm_restarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=6, eta_min=0.01),
    "warm_restarts_mult": lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "chained": lambda s, o: s.ChainedScheduler([s.ExponentialLR(o, gamma=0.95),
                                                s.StepLR(o, step_size=6, gamma=0.5)]),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_matches_torch(name):
    ours = _trajectory(dg, SCHEDULERS[name])
    theirs = _trajectory(torch, SCHEDULERS[name])
    for epoch, ((lr, mom), (lr_t, mom_t)) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(lr, lr_t, rtol=1e-12, err_msg=f"lr at epoch {epoch}")
        np.testing.assert_allclose(mom, mom_t, rtol=1e-12, err_msg=f"momentum at {epoch}")


def test_onecycle_cycles_adam_beta1():
    make = SCHEDULERS["onecycle"]
    ours = _trajectory(dg, make, optimizer="Adam")
    theirs = _trajectory(torch, make, optimizer="Adam")
    np.testing.assert_allclose([m for _, m in ours], [m for _, m in theirs], rtol=1e-12)


def test_onecycle_past_total_steps_raises():
    opt = _optimizer(dg)
    sched = dg.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        opt.step()
        sched.step()
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()


@pytest.mark.parametrize("kwargs", [
    dict(patience=2, cooldown=1),
    dict(mode="max", factor=0.5, patience=1, threshold_mode="abs", threshold=0.1),
    dict(patience=0, min_lr=[0.05, 0.2], threshold=0.05),
])
def test_reduce_on_plateau_matches_torch(kwargs):
    metrics = [1.0, 0.9, 0.95, 0.96, 0.97, 0.8, 0.85, 0.86, 0.87, 0.88, 0.7, 0.71] * 3
    lrs = {}
    for lib in (dg, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
        lrs[lib] = []
        for m in metrics:
            opt.step()
            sched.step(m)
            lrs[lib].append(sched.get_last_lr())
    np.testing.assert_allclose(lrs[dg], lrs[torch], rtol=1e-12)


@pytest.mark.parametrize("name", ["cosine", "onecycle", "sequential", "multistep", "lambda"])
def test_state_dict_round_trip(name):
    """Save the optimiser and scheduler mid-run, load both into fresh ones, continue: the
    learning rates are those of the uninterrupted run."""
    make, s = SCHEDULERS[name], dg.optim.lr_scheduler
    opt = _optimizer(dg)
    sched = make(s, opt)
    for _ in range(12):
        opt.step()
        sched.step()
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    opt2 = _optimizer(dg)
    sched2 = make(s, opt2)
    sched2.load_state_dict(sched_state)
    opt2.load_state_dict(opt_state)
    for _ in range(20):
        for o, sc in ((opt, sched), (opt2, sched2)):
            o.step()
            sc.step()
        assert sched2.get_last_lr() == sched.get_last_lr()


def test_step_before_optimizer_warns():
    opt = _optimizer(dg)
    sched = dg.optim.lr_scheduler.StepLR(opt, step_size=2)
    with pytest.warns(UserWarning, match="before optimizer.step"):
        sched.step()


def test_tensor_lr_updated_in_place():
    lr = dg.tensor(1.0, dtype=dg.float64)
    opt = dg.optim.SGD([dg.zeros(2, requires_grad=True)], lr=lr)
    sched = dg.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] is lr and lr.item() == 0.5


def test_resume_needs_initial_lr():
    with pytest.raises(KeyError, match="initial_lr"):
        dg.optim.lr_scheduler.StepLR(_optimizer(dg), step_size=2, last_epoch=5)


@pytest.mark.parametrize("T_mult", [1, 2, 3])
def test_warm_restarts_fractional_epochs_match_torch(T_mult):
    """Stepped once per batch with ``epoch + i / iters`` (and jumps back and forth), then
    resumed from its state_dict."""
    epochs = [e + i / 4 for e in range(12) for i in range(4)] + [30, 2.5, 7]
    runs = {}
    for lib in (dg, torch):
        opt = _optimizer(lib)
        sched = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=T_mult,
                                                                   eta_min=0.05)
        lrs = []
        for epoch in epochs:
            opt.step()
            sched.step(epoch)
            lrs.append(sched.get_last_lr())
        runs[lib] = lrs
    np.testing.assert_allclose(runs[dg], runs[torch], rtol=1e-12)
    opt = _optimizer(dg)
    sched = dg.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=T_mult)
    for _ in range(5):
        opt.step()
        sched.step()
    resumed = dg.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=T_mult)
    resumed.load_state_dict(sched.state_dict())
    sched.step()
    resumed.step()
    assert resumed.get_last_lr() == sched.get_last_lr()


def test_cyclic_lr_cycles_adam_beta1_and_needs_momentum():
    make = SCHEDULERS["cyclic"]
    ours = _trajectory(dg, make, optimizer="Adam")
    theirs = _trajectory(torch, make, optimizer="Adam")
    np.testing.assert_allclose([m for _, m in ours], [m for _, m in theirs], rtol=1e-12)
    plain = dg.optim.Adagrad([dg.zeros(1, requires_grad=True)])
    with pytest.raises(ValueError, match="momentum"):
        dg.optim.lr_scheduler.CyclicLR(plain, 0.1, 1.0)
    sched = dg.optim.lr_scheduler.CyclicLR(plain, 0.1, 1.0, cycle_momentum=False,
                                           scale_fn=lambda x: 1.0)
    assert "scale_fn" not in sched.state_dict()

