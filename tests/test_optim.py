"""Optimisers and gradient clipping against torch: identical starting weights, the same loss
written once for both libraries, parameters compared after every step."""
import copy
import math

import numpy as np
import pytest
import torch

import dualgraph as dg

STEPS = 6
RTOL, ATOL = 1e-5, 1e-6   # atol: entries that pass near 0 carry float32 noise


def _start(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((3, 4)).astype(dtype),
            "b": rng.standard_normal(4).astype(dtype)}


def _data(step, dtype=np.float32):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((3, 4)).astype(dtype), float(rng.standard_normal())


def _loss(lib, params, step):
    """A small non-separable problem built from basic ops, new data at every step."""
    x, y = _data(step, params["w"].detach().numpy().dtype)
    w, b = params["w"], params["b"]
    fit = ((w * lib.tensor(x)).sum() - y) ** 2
    return fit + ((b - 0.5) ** 2 * b).sum() + (w ** 2).sum() * 0.1


def _params(lib, start):
    return {k: lib.tensor(v.copy(), requires_grad=True) for k, v in start.items()}


def _step(lib, opt, params, step):
    opt.zero_grad()
    _loss(lib, params, step).backward()
    opt.step()


def _assert_params(dg_params, torch_params, step):
    for k in dg_params:
        np.testing.assert_allclose(dg_params[k].detach().numpy(),
                                   torch_params[k].detach().numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=f"parameter {k} after step {step}")


def _run_both(make_opt, start, steps=STEPS):
    """Run dualgraph and torch side by side from ``start``; ``make_opt(lib, params)``."""
    runs = {}
    for lib in (dg, torch):
        params = _params(lib, start)
        runs[lib] = (params, make_opt(lib, params))
    for step in range(steps):
        for lib, (params, opt) in runs.items():
            _step(lib, opt, params, step)
        _assert_params(runs[dg][0], runs[torch][0], step)
    return runs


CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
    ("SGD", dict(lr=0.01, momentum=0.5, maximize=True)),
    ("Adam", dict(lr=0.1)),
    ("Adam", dict(lr=0.05, weight_decay=0.1)),
    ("Adam", dict(lr=0.05, amsgrad=True)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6, maximize=True)),
    ("Adam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    ("AdamW", dict(lr=0.1)),
    ("AdamW", dict(lr=0.05, weight_decay=0.2, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1)),
    ("Adagrad", dict(lr=0.1, weight_decay=0.1, initial_accumulator_value=0.5)),
    ("Adagrad", dict(lr=0.1, eps=1e-3, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)),
    ("Adadelta", dict(lr=1.0, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1)),
    ("Adamax", dict(lr=0.05, eps=1e-3, maximize=True)),
    ("NAdam", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1)),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=0.1, alpha=0.5, t0=2, weight_decay=0.1)),
    ("ASGD", dict(lr=0.05, t0=0, maximize=True)),
]


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=lambda c: str(c))
def test_optimizer_matches_torch(name, kwargs):
    _run_both(lambda lib, p: getattr(lib.optim, name)(p.values(), **kwargs), _start())


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=lambda c: str(c))
def test_flat_step_gives_each_parameters_bits(name, kwargs, monkeypatch):
    """The eager step over small parameters at once (optim/flat.py) writes the same bits
    into every parameter and state entry as their steps one by one: with a parameter
    above the size bound, one of another dtype, and one whose gradient is missing at some
    steps (its step count then differs: it goes alone)."""
    from dualgraph.optim import flat
    rng = np.random.default_rng(3)
    shapes = [(3, 4), (4,), (), (5, 2), (70,), (2, 3)]
    starts = [rng.standard_normal(s).astype(np.float64 if i == 5 else np.float32)
              for i, s in enumerate(shapes)]
    runs, together_calls = [], []
    update_together = flat._update_together
    monkeypatch.setattr(flat, "_update_together", lambda opt, group, members, scalars: (
        together_calls.append(len(members)), update_together(opt, group, members, scalars)))
    for bound in (0, 64):
        monkeypatch.setattr(flat.inplace, "FLAT_MAX_NUMEL", bound)
        params = [dg.tensor(v.copy(), requires_grad=True) for v in starts]
        opt = getattr(dg.optim, name)(params, **kwargs)
        for step in range(4):
            grads = np.random.default_rng(step)
            for i, p in enumerate(params):
                p.grad = None if (i == 3 and step in (0, 2)) else dg.tensor(
                    grads.standard_normal(p.shape).astype(starts[i].dtype))
            opt.step()
        runs.append((params, opt))
    (each, opt_each), (together, opt_flat) = runs
    # each step: the small float32 ones with equal step counts (all four without state)
    assert len(together_calls) == 4 and min(together_calls) >= 3
    for i, (a, b) in enumerate(zip(each, together)):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(),
                                      err_msg=f"parameter {i}")
        for key, value in opt_each.state[a].items():
            np.testing.assert_array_equal(value.numpy(), opt_flat.state[b][key].numpy(),
                                          err_msg=f"state {key} of parameter {i}")
        assert opt_each.state[a].keys() == opt_flat.state[b].keys()


def test_flat_step_skips_an_overridden_update(monkeypatch):
    """A user's subclass that overrides ``_update`` gets its own calls, one a parameter."""
    seen = []

    class Mine(dg.optim.SGD):
        def _update(self, p, grad, state, group):
            seen.append(tuple(p.shape))
            super()._update(p, grad, state, group)
    params = [dg.ones(2, requires_grad=True), dg.ones(3, requires_grad=True)]
    for p in params:
        p.grad = dg.ones_like(p)
    Mine(params, lr=0.1).step()
    assert seen == [(2,), (3,)]


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop"])
def test_float64_parameters(name):
    kwargs = {"lr": 0.01, "momentum": 0.9} if name != "Adam" else {"lr": 0.01}
    _run_both(lambda lib, p: getattr(lib.optim, name)(p.values(), **kwargs),
              _start(dtype=np.float64))


@pytest.mark.parametrize("name,group_kwargs", [
    ("SGD", dict(lr=0.01, momentum=0.5)),
    ("Adam", dict(lr=0.01, betas=(0.5, 0.9), amsgrad=True)),
    ("RMSprop", dict(lr=0.001, centered=True)),
])
def test_param_groups(name, group_kwargs):
    def make(lib, p):
        return getattr(lib.optim, name)(
            [{"params": [p["w"]]}, {"params": [p["b"]], **group_kwargs}], lr=0.1)
    runs = _run_both(make, _start(1))
    dg_opt, torch_opt = runs[dg][1], runs[torch][1]
    for dg_group, torch_group in zip(dg_opt.param_groups, torch_opt.param_groups):
        for k, v in dg_group.items():
            if k != "params":
                assert torch_group[k] == v, k


def _clone_state_dict(sd):
    """A deep copy, as writing a checkpoint to disk and reading it back would give."""
    def copy_value(v):
        return dg.tensor(v.numpy()) if isinstance(v, dg.Tensor) else copy.deepcopy(v)
    return {"state": {i: {k: copy_value(v) for k, v in s.items()}
                      for i, s in sd["state"].items()},
            "param_groups": copy.deepcopy(sd["param_groups"])}


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.05, amsgrad=True)),
    ("AdamW", dict(lr=0.05)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.1)),
    ("Adamax", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05)),
    ("Rprop", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, t0=1)),
])
def test_state_dict_round_trip(name, kwargs):
    make = getattr(dg.optim, name)
    params = _params(dg, _start(2))
    opt = make(params.values(), **kwargs)
    for step in range(3):
        _step(dg, opt, params, step)
    saved = _clone_state_dict(opt.state_dict())
    resumed = {k: dg.tensor(v.detach().numpy(), requires_grad=True) for k, v in params.items()}
    opt2 = make(resumed.values(), lr=123.0)   # hyper-parameters come from the checkpoint
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == kwargs["lr"]
    for step in range(3, 7):
        _step(dg, opt, params, step)
        _step(dg, opt2, resumed, step)
        for k in params:
            np.testing.assert_array_equal(params[k].detach().numpy(),
                                          resumed[k].detach().numpy())


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("Adam", dict(lr=0.05, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adadelta", dict(lr=0.5)),
    ("Adamax", dict(lr=0.05)),
    ("NAdam", dict(lr=0.05)),
    ("RAdam", dict(lr=0.05)),
    ("Rprop", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, t0=1)),
])
def test_state_dict_layout_matches_torch(name, kwargs):
    runs = _run_both(lambda lib, p: getattr(lib.optim, name)(p.values(), **kwargs),
                     _start(3), steps=2)
    ours, theirs = runs[dg][1].state_dict(), runs[torch][1].state_dict()
    assert ours["state"].keys() == theirs["state"].keys()
    for i, state in ours["state"].items():
        assert state.keys() == theirs["state"][i].keys()
        for k, v in state.items():
            np.testing.assert_allclose(v.numpy(), theirs["state"][i][k].numpy(), rtol=RTOL,
                                       atol=ATOL, err_msg=k)
    for group, torch_group in zip(ours["param_groups"], theirs["param_groups"]):
        assert group["params"] == torch_group["params"]
        assert set(group) <= set(torch_group)


def test_load_state_dict_checks_layout():
    a, b = dg.zeros(2, requires_grad=True), dg.zeros(3, requires_grad=True)
    sd = dg.optim.SGD([a, b], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="parameter group"):
        dg.optim.SGD([a], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="parameter groups"):
        dg.optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)


def test_load_state_dict_copies_and_casts():
    p = dg.tensor([1.0, 2.0], requires_grad=True)
    opt = dg.optim.Adam([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    q = dg.tensor([1.0, 2.0], dtype=dg.float64, requires_grad=True)
    opt2 = dg.optim.Adam([q], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[q]["exp_avg"].dtype == dg.float64
    assert opt2.state[q]["step"].dtype == dg.float64
    assert opt2.state[q]["exp_avg_sq"] is not opt.state[p]["exp_avg_sq"]


def test_gradient_accumulation_by_not_zeroing():
    """Two backward passes without zero_grad sum their gradients, as in torch."""
    runs = {}
    for lib in (dg, torch):
        params = _params(lib, _start(4))
        opt = lib.optim.SGD(params.values(), lr=0.05, momentum=0.9)
        for step in range(4):
            if step % 2 == 0:
                opt.zero_grad()
            _loss(lib, params, step).backward()
            if step % 2 == 1:
                opt.step()
        runs[lib] = params
    _assert_params(runs[dg], runs[torch], "accumulated")


def test_zero_grad():
    p = dg.tensor([1.0, 2.0], requires_grad=True)
    opt = dg.optim.SGD([p], lr=0.1)
    (p * p).sum().backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert p.grad is None


def test_step_updates_parameters_in_place():
    p = dg.tensor([1.0, 2.0], requires_grad=True)
    storage, version = p._data, p._version_value
    opt = dg.optim.Adam([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    assert p._data is storage and p._version_value > version
    assert p.requires_grad and p.is_leaf


IN_PLACE_CONFIGS = [
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3, nesterov=False, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, weight_decay=0.2)),
]


@pytest.mark.parametrize("name,kwargs", IN_PLACE_CONFIGS, ids=lambda c: str(c))
@pytest.mark.parametrize("layout", ["float32", "float64", "transposed", "nonfinite", "empty",
                                    "tensor_lr"])
def test_big_parameters_are_updated_in_their_storage_as_torch(name, kwargs, layout,
                                                               monkeypatch):
    """An eager SGD/Adam step on a parameter above the flat bound (optim/flat.py) writes
    the parameter and its state in place (the update's kernel gets them as ``out=``): no
    copy back, and the values of torch's step, also where that fast path is not taken (a
    transposed parameter, float64) and with NaN and inf entries or no elements."""
    from dualgraph.ops import inplace
    shape = (0, 80) if layout == "empty" else (64, 80)
    if layout == "empty":   # (no flat step for it either)
        monkeypatch.setattr(inplace, "FLAT_MAX_NUMEL", -1)
    dtype = np.float64 if layout == "float64" else np.float32
    rng = np.random.default_rng(7)
    start = rng.standard_normal(shape).astype(dtype)
    if layout == "nonfinite":
        start[0, :3] = (np.nan, np.inf, -np.inf)
    writes, in_place = [], []
    write = inplace._write
    monkeypatch.setattr(inplace, "_write", lambda data, values: (
        writes.append(data.shape), write(data, values)))
    runs = {}
    for lib in (dg, torch):
        owner = lib.tensor(start.T.copy() if layout == "transposed" else start.copy())
        p = (owner.T if layout == "transposed" else owner).detach().requires_grad_(True)
        lr = kwargs["lr"]
        if layout == "tensor_lr" and lib is dg:
            lr = dg.tensor(lr)
        opt = getattr(lib.optim, name)([p], **dict(kwargs, lr=lr))
        for step in range(4):
            x = np.random.default_rng(step).standard_normal(shape).astype(dtype)
            opt.zero_grad()
            ((p * lib.tensor(x)).sum() ** 2 / 1e3 + (p ** 2).sum() * 0.1).backward()
            written = len(writes)
            opt.step()
            if lib is dg and step:   # (the first makes the state: SGD copies the gradient)
                in_place.append(shape not in writes[written:])
        runs[lib] = p, owner, opt
    (p, owner, opt), (tp, _, _) = runs[dg], runs[torch]
    np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    # the tensor the parameter shares its storage with saw every write
    np.testing.assert_array_equal(owner.numpy().T if layout == "transposed"
                                  else owner.numpy(), p.detach().numpy())
    if layout in ("float32", "nonfinite", "tensor_lr"):
        assert all(in_place), "a step copied its result into the parameter"


def test_closure_returns_loss():
    p = dg.tensor([1.0, 2.0], requires_grad=True)
    opt = dg.optim.SGD([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss
    with dg.no_grad():   # step's closure runs with grad enabled regardless
        loss = opt.step(closure)
    assert loss.item() == 5.0
    np.testing.assert_allclose(p.detach().numpy(), [0.8, 1.6], rtol=1e-6)


def test_tensor_learning_rate_matches_float():
    results = []
    for lr in (0.05, dg.tensor(0.05)):
        params = _params(dg, _start(5))
        opt = dg.optim.Adam(params.values(), lr=lr, weight_decay=0.1,
                            decoupled_weight_decay=True)
        for step in range(3):
            _step(dg, opt, params, step)
        results.append(params["w"].detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_parameter_errors():
    a, b = dg.zeros(2, requires_grad=True), dg.zeros(2, requires_grad=True)
    with pytest.raises(TypeError, match="iterable"):
        dg.optim.SGD(a, lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        dg.optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        dg.optim.SGD([{"params": [a, b]}, {"params": [a]}], lr=0.1)
    opt = dg.optim.SGD([a], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    opt.add_param_group({"params": [b], "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0
    with pytest.raises(ValueError, match="non-leaf"):
        dg.optim.SGD([a * 2], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        dg.optim.SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="learning rate"):
        dg.optim.Adam([a], lr=-1.0)
    with pytest.raises(ValueError, match="beta"):
        dg.optim.Adam([a], betas=(0.9, 1.0))


# -- gradient clipping ------------------------------------------------------------------------
def _grads_pair(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) * scale for s in [(3, 4), (5,), ()]]
    out = {}
    for lib in (dg, torch):
        params = [lib.tensor(a.copy(), requires_grad=True) for a in arrays]
        for p, a in zip(params, arrays):
            p.grad = lib.tensor(a * 3 + 1)
        out[lib] = params
    return out


@pytest.mark.parametrize("foreach", [None, True, False])
@pytest.mark.parametrize("norm_type", [2.0, 1, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_clip_grad_norm_matches_torch(norm_type, max_norm, foreach):
    """(``foreach=``, torch's keyword, is taken: it raised TypeError.)"""
    params = _grads_pair(0)
    total_dg = dg.nn.utils.clip_grad_norm_(params[dg], max_norm, norm_type=norm_type,
                                           foreach=foreach)
    total_torch = torch.nn.utils.clip_grad_norm_(params[torch], max_norm, norm_type=norm_type,
                                                 foreach=foreach)
    dg.nn.utils.clip_grad_value_(params[dg], 0.1, foreach=foreach)
    torch.nn.utils.clip_grad_value_(params[torch], 0.1, foreach=foreach)
    assert isinstance(total_dg, dg.Tensor) and total_dg.ndim == 0
    np.testing.assert_allclose(total_dg.item(), total_torch.item(), rtol=1e-6)
    for p, q in zip(params[dg], params[torch]):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_get_total_norm_and_clip_grads_with_norm_match_torch(norm_type):
    """torch 2.6's two halves of clip_grad_norm_ (round 13: a loop that logs the norm
    before clipping met them missing): the norm of the gradients, then the scaling by a
    given norm, compiled as eagerly."""
    params = _grads_pair(2, scale=3.0)
    totals = {}
    for lib in (dg, torch):
        grads = [p.grad for p in params[lib]]
        totals[lib] = lib.nn.utils.get_total_norm(grads, norm_type=norm_type)
        lib.nn.utils.clip_grads_with_norm_(params[lib], 1.5, totals[lib])
        assert lib.nn.utils.get_total_norm([]).item() == 0.0
    np.testing.assert_allclose(totals[dg].item(), totals[torch].item(), rtol=1e-6)
    for p, q in zip(params[dg], params[torch]):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)

    def clip(ps):
        total = dg.nn.utils.get_total_norm([p.grad for p in ps], norm_type=norm_type)
        dg.nn.utils.clip_grads_with_norm_(ps, 0.5, total)
        return total

    eager, compiled = _grads_pair(2, scale=3.0)[dg], _grads_pair(2, scale=3.0)[dg]
    np.testing.assert_allclose(dg.compile(clip)(compiled).item(), clip(eager).item(),
                               rtol=1e-6)
    for p, q in zip(compiled, eager):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_scales_small_grads_together_with_the_same_bits(monkeypatch):
    """The small gradients are scaled as one flat tensor (ops/inplace.py): the same bits as
    one multiply each, with a large one and one of another dtype scaled on their own."""
    from dualgraph.ops import inplace
    rng = np.random.default_rng(5)
    shapes = [(3, 4), (5,), (), (80,), (2, 2)]
    starts = [rng.standard_normal(s).astype(np.float64 if i == 4 else np.float32)
              for i, s in enumerate(shapes)]
    results = []
    for bound in (0, 64):
        monkeypatch.setattr(inplace, "FLAT_MAX_NUMEL", bound)
        params = [dg.tensor(v, requires_grad=True) for v in starts]
        for p, v in zip(params, starts):
            p.grad = dg.tensor(v * 3)
        grads = [p.grad for p in params]
        total = dg.nn.utils.clip_grad_norm_(params, 0.5)
        assert all(p.grad is g for p, g in zip(params, grads))   # (scaled in place)
        results.append([total.numpy()] + [p.grad.numpy() for p in params])
    for each, together in zip(*results):
        np.testing.assert_array_equal(each, together)



@pytest.mark.parametrize("p", [2.0, 1, 3.0, 0, math.inf, -math.inf, "fro"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_norms_is_the_stack_of_each_norm_to_the_bit(p, dtype, monkeypatch):
    """``reduce.norms`` (clip_grad_norm_'s per-gradient norms, run without a dispatch per
    tensor where nothing records) gives the bits of ``stack([norm(t, p), ...])``, at odd
    shapes (0-d, empty, 3-d), and takes the ops' path where a gradient is asked for."""
    from dualgraph.ops import reduce
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(s).astype(dtype) for s in [(3, 4), (), (0, 3), (2, 3, 5), (1,)]]
    arrays[0][1, 2] = 0.0
    if p in (math.inf, -math.inf):   # (no infinity norm of an empty tensor: an error)
        with pytest.raises(ValueError, match="norm failed at .*test_optim"):
            reduce.norms([dg.tensor(arrays[0]), dg.tensor(arrays[2])], p)
        del arrays[2]
    tensors = [dg.tensor(a) for a in arrays]
    with monkeypatch.context() as m:   # (no op dispatched for the norms)
        m.setattr(reduce, "apply", None)
        got = reduce.norms(tensors, p)
    want = dg.stack([dg.norm(t, p=p) for t in tensors])
    assert got.dtype == want.dtype and tuple(got.shape) == (len(arrays),)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if dtype != "float16":
        ref = torch.stack([torch.linalg.vector_norm(torch.tensor(a), 2 if p == "fro" else p)
                           for a in arrays])
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)
    leaves = [dg.tensor(a, requires_grad=True) for a in arrays[:2]]
    recorded = reduce.norms(leaves, p)
    assert recorded.grad_fn is not None
    if p not in (0, math.inf, -math.inf):
        recorded.sum().backward()
        x = torch.tensor(arrays[0], requires_grad=True)
        torch.linalg.vector_norm(x, 2 if p == "fro" else p).backward()
        np.testing.assert_allclose(leaves[0].grad.numpy(), x.grad.numpy(), rtol=2e-3,
                                   atol=1e-6)


def test_norms_while_tracing_is_the_ops():
    from dualgraph.ops import reduce
    xs = [dg.tensor([3.0, 4.0]), dg.tensor([[1.0, 2.0], [2.0, 4.0]])]
    compiled = dg.compile(lambda a, b: reduce.norms([a, b]) * 2)
    np.testing.assert_allclose(compiled(*xs).numpy(), [10.0, 10.0], rtol=1e-6)
    np.testing.assert_allclose(compiled(xs[0] * 2, xs[1]).numpy(), [20.0, 10.0], rtol=1e-6)


def test_commit_flat_writes_as_commit_inplace():
    """commit_flat's write without history bumps each target's version (a saved value
    changed under a VJP is caught), and takes commit_inplace's path for a view (the write
    reaches its base) and for a leaf that requires grad with grad mode on (refused)."""
    from dualgraph.ops.inplace import commit_flat
    base = dg.zeros(2, 3)
    targets = [dg.zeros(2), base[1], dg.zeros(())]
    w = dg.ones(2, requires_grad=True)
    y = (w * targets[0]).sum()         # saves targets[0]
    commit_flat(targets, dg.arange(6.0))
    np.testing.assert_array_equal(targets[0].numpy(), [0.0, 1.0])
    np.testing.assert_array_equal(base.numpy(), [[0, 0, 0], [2, 3, 4]])
    assert targets[2].item() == 5.0
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()
    leaf = dg.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        commit_flat([leaf], dg.ones(2))
    with dg.no_grad():
        commit_flat([leaf], dg.ones(2))
    np.testing.assert_array_equal(leaf.detach().numpy(), [1.0, 1.0])

def test_clip_grad_norm_single_tensor_and_no_grads():
    p = dg.tensor([3.0, 4.0], requires_grad=True)
    assert dg.nn.utils.clip_grad_norm_(p, 1.0).item() == 0.0
    p.grad = dg.tensor([6.0, 8.0])
    assert dg.nn.utils.clip_grad_norm_(p, 1.0).item() == pytest.approx(10.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_clip_grad_norm_nonfinite():
    p = dg.tensor([1.0, 2.0], requires_grad=True)
    p.grad = dg.tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        dg.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    total = dg.nn.utils.clip_grad_norm_([p], 1.0)
    assert math.isnan(total.item())


def test_clip_grad_value_matches_torch():
    params = _grads_pair(1, scale=2.0)
    dg.nn.utils.clip_grad_value_(params[dg], 1.5)
    torch.nn.utils.clip_grad_value_(params[torch], 1.5)
    for p, q in zip(params[dg], params[torch]):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())



def test_clip_grad_value_small_ones_together_large_and_other_dtypes_alone():
    """The small gradients are clamped as one flat tensor, in place (the same tensors),
    a large one and one of another dtype on their own: torch's values for all."""
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal(s) * 3 for s in [(3, 4), (), (5000,), (2, 2), (7,)]]
    arrays = [a.astype(np.float64 if i == 3 else np.float32) for i, a in enumerate(arrays)]
    ours = [dg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    for lib, params in ((dg, ours), (torch, theirs)):
        for p, a in zip(params, arrays):
            p.grad = lib.tensor(a * 2)
    before = [p.grad for p in ours]
    dg.nn.utils.clip_grad_value_(ours, 2.5)
    torch.nn.utils.clip_grad_value_(theirs, 2.5)
    for p, g, q in zip(ours, before, theirs):
        assert p.grad is g
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())

def test_parameters_to_vector_round_trip():
    params = _grads_pair(2)
    vec = dg.nn.utils.parameters_to_vector(params[dg])
    expected = torch.nn.utils.parameters_to_vector(params[torch])
    np.testing.assert_array_equal(vec.detach().numpy(), expected.detach().numpy())
    dg.nn.utils.vector_to_parameters(vec * 2, params[dg])
    for p, q in zip(params[dg], params[torch]):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy() * 2)


def test_checkpoint_through_dg_save(tmp_path):
    """An optimiser's state_dict written by dg.save and read by dg.load resumes exactly."""
    params = _params(dg, _start(6))
    opt = dg.optim.Adam(params.values(), lr=0.05, amsgrad=True)
    for step in range(3):
        _step(dg, opt, params, step)
    path = str(tmp_path / "optim.safetensors")
    dg.io.save({"optim": opt.state_dict(),
                "params": {k: v.detach() for k, v in params.items()}}, path)
    ckpt = dg.io.load(path)
    resumed = {k: v.requires_grad_() for k, v in ckpt["params"].items()}
    opt2 = dg.optim.Adam(resumed.values())
    opt2.load_state_dict(ckpt["optim"])
    for step in range(3, 6):
        _step(dg, opt, params, step)
        _step(dg, opt2, resumed, step)
    for k in params:
        np.testing.assert_array_equal(params[k].detach().numpy(), resumed[k].detach().numpy())


def test_docs_examples_run():
    import pathlib
    import re
    doc = pathlib.Path(__file__).parent.parent / "docs" / "optim.md"
    for block in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S):
        exec(compile(block, str(doc), "exec"), {"print": lambda *a: None})


GROUP_SHAPES = [(128,), (3, 5), (70, 70), (1,)]   # below and above the loops' threshold


def count_group_calls(monkeypatch, name: str) -> list:
    """Record the number of parameters of each run of the group loop
    ``kernels.optim.<name>`` (``kernels.optim.run_group``)."""
    from dualgraph import kernels
    calls = []
    run = kernels.optim.run_group

    def counting(loop, table, *args, **kwargs):
        if loop is getattr(kernels.optim, name):
            calls.append(len(table))
        return run(loop, table, *args, **kwargs)
    monkeypatch.setattr(kernels.optim, "run_group", counting)
    return calls


def _adam_members(shapes, seed=0, step=4.0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for _ in range(3)]
            + [np.abs(rng.standard_normal(s)).astype(np.float32), np.asarray(step)]
            for s in shapes]


def test_adam_update_group_is_one_loop_call_with_each_parameters_bits(monkeypatch):
    """``adam_update_group`` (a compiled step's whole Adam update, see the
    ``group_updates`` pass): written in place, all parameters in one call of the loop; the
    same bits as each parameter's own ``adam_update`` (the NumPy kernel below 4096
    elements, the loop above); fresh outputs or differing steps go parameter by parameter."""
    from dualgraph import kernels
    from dualgraph.optim import _ops
    hyper = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, decay=0.999)
    shapes = GROUP_SHAPES
    calls = count_group_calls(monkeypatch, "adam_many_in_place")

    def each(members):
        return [a for p, g, m, v, t in [[a.copy() for a in mem] for mem in members]
                for a in _ops._adam_kernel(p, g, m, v, t, **hyper)]
    members = _adam_members(shapes)
    want = each(members)
    out = [a for p, g, m, v, t in members for a in (p, m, v)]
    got = _ops._adam_group_kernel(*[a for mem in members for a in mem], out=out, **hyper)
    assert all(g is o for g, o in zip(got, out))
    assert calls == ([len(shapes)] if kernels.numba_available() else [])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    fresh = _adam_members(shapes, 1)          # fresh outputs
    ahead = _adam_members(shapes, 2)
    ahead[-1][4] = np.asarray(5.0)            # in place, but one parameter a step ahead
    for members, out in ((fresh, None),
                         (ahead, [a for p, g, m, v, t in ahead for a in (p, m, v)])):
        want = each(members)
        got = _ops._adam_group_kernel(*[a for mem in members for a in mem], out=out, **hyper)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert len(calls) == (1 if kernels.numba_available() else 0)


def test_sgd_update_group_is_one_loop_call_with_each_parameters_bits(monkeypatch):
    """``sgd_update_group``, as the Adam one: in place, one loop call for every parameter,
    the same bits as each parameter's ``sgd_update``; fresh outputs go one by one."""
    from dualgraph import kernels
    from dualgraph.optim import _ops
    hyper = dict(lr=0.1, momentum=0.9, dampening=0.0, nesterov=True)
    shapes = GROUP_SHAPES
    calls = count_group_calls(monkeypatch, "sgd_many_in_place")

    def members(seed):
        rng = np.random.default_rng(seed)
        return [[rng.standard_normal(s).astype(np.float32) for _ in range(3)] for s in shapes]

    def each(group):
        return [a for p, g, b in [[a.copy() for a in m] for m in group]
                for a in _ops._sgd_kernel(p, g, b, **hyper)]
    for seed, in_place in ((0, True), (1, False)):
        group = members(seed)
        want = each(group)
        out = [a for p, g, b in group for a in (p, b)] if in_place else None
        got = _ops._sgd_group_kernel(*[a for m in group for a in m], out=out, **hyper)
        assert not in_place or all(g is o for g, o in zip(got, out))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert calls == ([len(shapes)] if kernels.numba_available() else [])


@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_group_update_shared_with_openblas_threads_gives_the_same_bits(monkeypatch, update):
    """A group of ``kernels.threads.SHARE_MIN`` elements or more runs in element ranges on
    OpenBLAS's threads (``kernels/blas_threads.py``), right after a matmul as in a training
    step: the same bits as the same group run as one job (the ``"blas"`` trick off)
    and as each parameter's own update, and the jobs really went to OpenBLAS where it has
    two threads."""
    from dualgraph import kernels
    from dualgraph.kernels import blas_threads, tuning
    from dualgraph.optim import _ops
    if not kernels.numba_available():
        pytest.skip("the group loops need Numba")
    shapes = [(300, 401), (401,), (97, 300), (5,)]          # 150k elements: shared
    assert sum(int(np.prod(s)) for s in shapes) >= kernels.threads.SHARE_MIN
    if update == "sgd":
        hyper = dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
        kernel, group_kernel = _ops._sgd_kernel, _ops._sgd_group_kernel
        rng = np.random.default_rng(3)
        members = [[rng.standard_normal(s).astype(np.float32) for _ in range(3)]
                   for s in shapes]
        written = (0, 2)
    else:
        hyper = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, decay=0.999)
        kernel, group_kernel = _ops._adam_kernel, _ops._adam_group_kernel
        members = _adam_members(shapes, seed=3)
        written = (0, 2, 3)

    def grouped(threads: str):
        monkeypatch.setattr(tuning, "active", tuning.active | {"blas"} if threads == "1"
                            else tuning.active - {"blas"})
        group = [[a.copy() for a in m] for m in members]
        a = np.ones((256, 256), np.float32)
        np.matmul(a, a)                 # OpenBLAS's workers are polling for work now
        out = [m[i] for m in group for i in written]
        got = group_kernel(*[a for m in group for a in m], out=out, **hyper)
        assert all(g is o for g, o in zip(got, out))
        return got
    runs = []
    run = blas_threads.run
    monkeypatch.setattr(blas_threads, "run", lambda address, blocks: runs.append(len(blocks))
                        or run(address, blocks))
    shared, alone = grouped("1"), grouped("0")
    each = [a for m in [[a.copy() for a in m] for m in members] for a in kernel(*m, **hyper)]
    for s, a, e in zip(shared, alone, each):
        np.testing.assert_array_equal(s, a)
        np.testing.assert_array_equal(s, e)
    monkeypatch.setattr(tuning, "active", tuning.active | {"blas"})
    if blas_threads.count() > 1 and kernels.native.enabled():
        assert runs == [blas_threads.count()]
    else:
        assert runs == []


@pytest.mark.parametrize("name,kwargs", [("Adadelta", {}), ("Adamax", dict(lr=0.05)),
                                         ("NAdam", dict(lr=0.05, weight_decay=0.1)),
                                         ("RAdam", dict(lr=0.05)), ("Rprop", dict(lr=0.05)),
                                         ("ASGD", dict(lr=0.05, t0=3))])
def test_compiled_step_matches_eager(name, kwargs):
    """The whole step captured with dg.compile: the step-dependent scalars (bias
    corrections, NAdam's schedule, RAdam's rectification switch at step 6) are graph
    values, so one capture serves every step and matches the eager run."""
    x = dg.tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    runs = []
    for compiled in (False, True):
        w = dg.tensor(np.linspace(-1, 1, 4).astype(np.float32), requires_grad=True)
        opt = getattr(dg.optim, name)([w], **kwargs)

        def step():
            opt.zero_grad()
            loss = ((x * w).sum(1) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        run = dg.compile(step) if compiled else step
        runs.append([run().item() for _ in range(8)] + w.detach().numpy().tolist())
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name,kwargs,schedule", [
    ("Adam", dict(lr=1e-2), "exponential"), ("AdamW", dict(lr=1e-2), "exponential"),
    ("SGD", dict(lr=1e-2, momentum=0.9), "exponential"),
    ("SGD", dict(lr=1e-2, momentum=0.9, nesterov=True), "one_cycle"),
    ("Adam", dict(lr=1e-2), "one_cycle")])
def test_scheduled_hyper_parameters_keep_the_fused_update(name, kwargs, schedule):
    """A schedule that changes lr (OneCycleLR: also momentum, Adam's beta1) at every step
    makes it a graph input after its second change; the step then runs the fused update
    with the hyper-parameters as inputs (``*_update_hyper_group``), not op by op, traces
    no more, and matches the eager run (losses, parameters, optimiser state)."""
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((6, 4)).astype(np.float32),
             rng.standard_normal((6, 2)).astype(np.float32)) for _ in range(9)]
    runs = []
    for compiled in (False, True):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.Tanh(), dg.nn.Linear(8, 2))
        opt = getattr(dg.optim, name)(model.parameters(), **kwargs)
        sched = (dg.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
                 if schedule == "exponential" else
                 dg.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=20))

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        run = dg.compile(step) if compiled else step
        losses = []
        for x, y in data:
            losses.append(run(dg.tensor(x), dg.tensor(y)).item())
            sched.step()
        state = [t.numpy().copy() for s in opt.state.values() for t in s.values()
                 if isinstance(t, dg.Tensor)]
        runs.append((losses, [p.detach().numpy().copy() for p in model.parameters()], state))
    (want, want_p, want_s), (got, got_p, got_s) = runs
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g, w in zip(got_p + got_s, want_p + want_s):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
    assert len(run.cache) <= 3 + (name == "SGD"), run.explain()   # (SGD: the buffer's step)
    updates = [n.op.name for n in run.optimized_graph.nodes if "update" in n.op.name]
    assert updates == [f"{'adam' if 'Adam' in name else 'sgd'}_update_hyper_group"], updates


@pytest.mark.parametrize("kwargs", [dict(), dict(lr=0.5, history_size=3, max_iter=7),
                                    dict(max_iter=4, max_eval=3),
                                    dict(line_search_fn="strong_wolfe"),
                                    dict(lr=0.3, max_iter=6, history_size=2,
                                         line_search_fn="strong_wolfe")])
def test_lbfgs_matches_torch(kwargs):
    """LBFGS's steps (each up to max_iter iterations, re-evaluating the closure) next to
    torch's, from the same weights; its state (iteration and evaluation counts) too. In
    float64: over dozens of iterations float32 rounding differences grow past 1e-5."""
    runs = {}
    for lib in (dg, torch):
        params = _params(lib, _start(6, dtype=np.float64))
        opt = lib.optim.LBFGS(params.values(), **kwargs)

        def closure():   # a convex problem: LBFGS converges instead of running off
            opt.zero_grad()
            x, y = _data(0, np.float64)
            w, b = params["w"], params["b"]
            loss = (((w * lib.tensor(x)).sum(1) - y) ** 2).sum() + ((b - 0.5) ** 4).sum() + (
                w ** 2).sum() * 0.1
            loss.backward()
            return loss
        losses = [float(opt.step(closure)) for _ in range(3)]
        runs[lib] = (params, losses, opt.state[params["w"]])
    _assert_params(runs[dg][0], runs[torch][0], "LBFGS")
    np.testing.assert_allclose(runs[dg][1], runs[torch][1], rtol=1e-5)
    assert (runs[dg][2]["n_iter"], runs[dg][2]["func_evals"]) == (
        runs[torch][2]["n_iter"], runs[torch][2]["func_evals"])


@pytest.mark.parametrize("lr", [4.0, 0.05])
def test_lbfgs_strong_wolfe_brackets_and_zooms_as_torchs(lr):
    """A nonconvex 1-d loss whose trial steps overshoot (lr 4: the zoom phase runs) or fall
    short (lr 0.05: the bracketing phase extrapolates): the same steps as torch's."""
    runs = {}
    for lib in (dg, torch):
        w = lib.tensor([0.3], dtype=lib.float64, requires_grad=True)
        opt = lib.optim.LBFGS([w], lr=lr, max_iter=6, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = (lib.sin(3 * w) + 0.1 * w ** 2).sum()
            loss.backward()
            return loss
        runs[lib] = ([float(opt.step(closure)) for _ in range(2)], float(w),
                     opt.state[w]["func_evals"])
    np.testing.assert_allclose(runs[dg][0] + [runs[dg][1]], runs[torch][0] + [runs[torch][1]],
                               rtol=1e-12)
    assert runs[dg][2] == runs[torch][2]


def test_lbfgs_refuses_what_it_lacks():
    w = dg.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="line_search_fn must be None or 'strong_wolfe'"):
        dg.optim.LBFGS([w], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="parameter groups"):
        dg.optim.LBFGS([{"params": [w]}, {"params": [dg.zeros(1, requires_grad=True)]}])
