"""torch.optim.swa_utils and the ``_foreach_*`` functions against torch's: averaged weights
(SWA, EMA by avg_fn and by multi_avg_fn, buffers averaged or copied), update_bn's
statistics, SWALR's learning rates, and each model's averaged copy trained a few steps."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.optim import swa_utils


def _pair(seed=0):
    """The same small BatchNorm model in both libraries."""
    def build(lib):
        return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.BatchNorm1d(6), lib.nn.ReLU(),
                                 lib.nn.Linear(6, 3))
    ours, theirs = build(dg), build(torch)
    rng = np.random.default_rng(seed)
    state = {k: rng.normal(size=tuple(v.shape)).astype(np.float32)
             for k, v in theirs.state_dict().items() if v.dtype == torch.float32}
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    ours.load_state_dict({k: dg.tensor(v) for k, v in state.items()}, strict=False)
    return ours, theirs


def _train(model, averaged, lib, data, make_opt=lambda p, lib: lib.optim.SGD(p, lr=0.1)):
    opt = make_opt(model.parameters(), lib)
    for x, y in data:
        opt.zero_grad()
        lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y)).backward()
        opt.step()
        averaged.update_parameters(model)


def _data(n=5, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(8, 4)).astype(np.float32), rng.integers(0, 3, 8))
            for _ in range(n)]


def _same_state(ours, theirs, rtol=1e-6):
    got, want = ours.state_dict(), theirs.state_dict()
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_allclose(got[k].numpy(), want[k].numpy(), rtol=rtol, atol=1e-7,
                                   err_msg=k)


@pytest.mark.parametrize("kind", ["swa", "ema_multi", "ema_one", "swa_multi", "ema_buffers"])
def test_averaged_model_matches_torch(kind):
    def averaged(lib, model):
        su = lib.optim.swa_utils
        return {"swa": lambda: su.AveragedModel(model),
                "ema_multi": lambda: su.AveragedModel(
                    model, multi_avg_fn=su.get_ema_multi_avg_fn(0.9)),
                "ema_one": lambda: su.AveragedModel(model, avg_fn=su.get_ema_avg_fn(0.8)),
                "swa_multi": lambda: su.AveragedModel(
                    model, multi_avg_fn=su.get_swa_multi_avg_fn()),
                "ema_buffers": lambda: su.AveragedModel(
                    model, multi_avg_fn=su.get_ema_multi_avg_fn(0.9), use_buffers=True),
                }[kind]()
    ours, theirs = _pair()
    avg_ours, avg_theirs = averaged(dg, ours), averaged(torch, theirs)
    data = _data()
    _train(ours, avg_ours, dg, data)
    _train(theirs, avg_theirs, torch, data)
    _same_state(avg_ours, avg_theirs)
    assert int(avg_ours.n_averaged) == len(data)
    x = _data(1, seed=5)[0][0]
    avg_ours.eval(), avg_theirs.eval()
    np.testing.assert_allclose(avg_ours(dg.tensor(x)).detach().numpy(),
                               avg_theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5)


def test_update_bn_recomputes_statistics_as_torch():
    ours, theirs = _pair()
    avg_ours, avg_theirs = swa_utils.AveragedModel(ours), \
        torch.optim.swa_utils.AveragedModel(theirs)
    data = _data()
    _train(ours, avg_ours, dg, data)
    _train(theirs, avg_theirs, torch, data)
    batches = [x for x, _ in _data(4, seed=3)]
    avg_ours.eval(), avg_theirs.eval()
    swa_utils.update_bn([(dg.tensor(x), 0) for x in batches], avg_ours)
    torch.optim.swa_utils.update_bn([(torch.tensor(x), 0) for x in batches], avg_theirs)
    _same_state(avg_ours, avg_theirs, rtol=1e-5)
    assert not avg_ours.training and avg_ours.module[1].momentum == 0.1


@pytest.mark.parametrize("strategy,anneal", [("cos", 3), ("linear", 4), ("cos", 0)])
def test_swalr_learning_rates_match_torch(strategy, anneal):
    def rates(lib):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.zeros(2))], lr=0.5, momentum=0.9)
        first = lib.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        swa = lib.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=anneal,
                                        anneal_strategy=strategy)
        out = []
        for epoch in range(9):
            opt.step()
            (swa if epoch >= 3 else first).step()
            out.append(opt.param_groups[0]["lr"])
        return out
    np.testing.assert_allclose(rates(dg), rates(torch), rtol=1e-12)


def test_bad_arguments_raise_as_torch():
    model = dg.nn.Linear(2, 2)
    with pytest.raises(AssertionError, match="Only one of"):
        swa_utils.AveragedModel(model, avg_fn=swa_utils.get_ema_avg_fn(),
                                multi_avg_fn=swa_utils.get_ema_multi_avg_fn())
    with pytest.raises(ValueError, match="decay"):
        swa_utils.get_ema_multi_avg_fn(1.5)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy"):
        swa_utils.SWALR(opt, 0.01, anneal_strategy="step")
    with pytest.raises(ValueError, match="anneal_epochs"):
        swa_utils.SWALR(opt, 0.01, anneal_epochs=-1)


@pytest.mark.parametrize("name,args", [
    ("_foreach_add", (2.0,)), ("_foreach_mul", ([2.0, 3.0],)), ("_foreach_sqrt", ()),
    ("_foreach_norm", ()), ("_foreach_maximum", (0.5,)), ("_foreach_addcdiv_", "tensors"),
    ("_foreach_lerp_", ("other", None, 0.25)), ("_foreach_add_", ("other", 0.5)), ("_foreach_zero_", ()),
    ("_foreach_mul_", ("other",)), ("_foreach_neg_", ())])
def test_foreach_functions_match_torch(name, args):
    rng = np.random.default_rng(0)
    xs = [rng.uniform(0.5, 2, s).astype(np.float32) for s in ((3,), (2, 2))]
    ys = [rng.uniform(0.5, 2, x.shape).astype(np.float32) for x in xs]

    def run(lib):
        a, b = [lib.tensor(x) for x in xs], [lib.tensor(y) for y in ys]
        if args == "tensors":
            extra, kw = (b, b), {}
        elif args and args[0] == "other":   # ("other", alpha) or ("other", None, weight)
            extra = (b,) + tuple(args[2:])
            kw = {"alpha": args[1]} if len(args) > 1 and args[1] is not None else {}
        else:
            extra, kw = args, {}
        out = getattr(lib, name)(a, *extra, **kw)
        return [t.numpy() for t in out], out is a
    (got, same_got), (want, same_want) = run(dg), run(torch)
    assert same_got == same_want
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_foreach_list_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="one value per tensor"):
        dg._foreach_mul([dg.ones(2), dg.ones(3)], [1.0])
