"""dg.func (torch.func's transforms) and dg.autograd.functional against torch's: values of
grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap (in_dims/out_dims nesting,
randomness modes), functional_call (tied weights, strict), stack_module_state with
vmap (model ensembling) and per-sample gradients, nested transforms, the same computations
compiled, and the errors for misuse."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import func as dgf


def _np(t):
    return t.detach().numpy()


def _close(got, want, rtol=1e-5, atol=1e-6):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, rtol, atol)
    elif isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _close(got[k], want[k], rtol, atol)
    else:
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(_np(got), _np(want), rtol=rtol, atol=atol)


def _pair(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=s).astype(np.float64) for s in shapes]
    return [dg.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]


def f_scalar(lib):
    return lambda x, y: (lib.sin(x) * y).sum() + (x ** 3).sum() * y.mean()


def f_vector(lib):
    return lambda x, y: lib.tanh(x @ y) * x.sum()


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_grad_and_value(argnums):
    (a, b), (ta, tb) = _pair((3,), (3,))
    _close(dgf.grad(f_scalar(dg), argnums)(a, b), torch.func.grad(f_scalar(torch), argnums)(ta, tb))
    g, v = dgf.grad_and_value(f_scalar(dg), argnums)(a, b)
    tg, tv = torch.func.grad_and_value(f_scalar(torch), argnums)(ta, tb)
    _close(g, tg), _close(v, tv)


def test_grad_has_aux_and_pytree_arguments():
    (a, b), (ta, tb) = _pair((2, 3), (3,))

    def loss(lib):
        def f(params, x):
            out = lib.tanh(x @ params["w"]) + params["b"][0]
            return out.sum(), {"out": out}
        return f
    got, aux = dgf.grad(loss(dg), has_aux=True)({"w": a, "b": [b]}, b[:2])
    want, taux = torch.func.grad(loss(torch), has_aux=True)({"w": ta, "b": [tb]}, tb[:2])
    _close(got, want), _close(aux, taux)
    assert not got["w"].requires_grad and not aux["out"].requires_grad


def test_nested_grad_is_the_second_derivative():
    (a,), (ta,) = _pair((4,))

    def f(lib):
        return lambda x: lib.func.grad(lambda y: (lib.sin(y) * y ** 2).sum())(x).sum()
    _close(dgf.grad(f(dg))(a), torch.func.grad(f(torch))(ta))


def test_grad_of_a_tensor_that_requires_grad_stays_differentiable():
    (a,), (ta,) = _pair((3,))
    a.requires_grad_(True), ta.requires_grad_(True)
    g, tg = dgf.grad(lambda x: (x ** 3).sum())(a), torch.func.grad(lambda x: (x ** 3).sum())(ta)
    g.sum().backward(), tg.sum().backward()
    _close(a.grad, ta.grad)


def test_vjp_and_jvp():
    (a, b, v), (ta, tb, tv) = _pair((3, 3), (3,), (3,))
    out, fn = dgf.vjp(f_vector(dg), a, b)
    tout, tfn = torch.func.vjp(f_vector(torch), ta, tb)
    _close(out, tout), _close(fn(v), tfn(tv))
    (u, w), (tu, tw) = _pair((3, 3), (3,), seed=1)
    _close(dgf.jvp(f_vector(dg), (a, b), (u, w)), torch.func.jvp(f_vector(torch), (ta, tb), (tu, tw)))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jacobians(transform, argnums):
    (a, b), (ta, tb) = _pair((2, 3), (3,))
    got = getattr(dgf, transform)(f_vector(dg), argnums)(a, b)
    want = getattr(torch.func, transform)(f_vector(torch), argnums)(ta, tb)
    _close(got, want)


def test_hessian():
    (a, b), (ta, tb) = _pair((3,), (3,))
    _close(dgf.hessian(f_scalar(dg))(a, b), torch.func.hessian(f_scalar(torch))(ta, tb))
    _close(dgf.hessian(f_scalar(dg), (0, 1))(a, b),
           torch.func.hessian(f_scalar(torch), (0, 1))(ta, tb))


def _two_outputs(lib):
    return lambda x, y: (lib.tanh(x * y.sum()) * 2, x.max())


def _outer(lib):
    return lambda x, y: lib.outer(x, y)


@pytest.mark.parametrize("f,shapes,in_dims,out_dims", [
    (_two_outputs, ((4, 3), (4, 3)), 0, 0),
    (_two_outputs, ((3, 4), (3,)), (1, None), 0),
    (_outer, ((4, 3), (4, 2)), (0, 0), 1),
    (_outer, ((3,), (2, 4)), (None, 1), 2),
    (_two_outputs, ((4, 3), (4, 3)), 0, (1, 0)),
])
def test_vmap_dims(f, shapes, in_dims, out_dims):
    args, targs = _pair(*shapes)
    if f is _two_outputs and out_dims == (1, 0):
        got = dgf.vmap(lambda x, y: (_outer(dg)(x, y), x.max()), in_dims, out_dims)(*args)
        want = torch.func.vmap(lambda x, y: (_outer(torch)(x, y), x.max()), in_dims,
                                out_dims)(*targs)
    else:
        got = dgf.vmap(f(dg), in_dims, out_dims)(*args)
        want = torch.func.vmap(f(torch), in_dims, out_dims)(*targs)
    _close(got, want)


def test_vmap_nested_structures_and_kwargs():
    (a, b), (ta, tb) = _pair((5, 2), (5, 2))

    def f(lib):
        def g(d, scale=1.0):
            return {"s": (d["x"] * d["y"][0]).sum() * scale, "v": d["x"] + 1}
        return g
    got = dgf.vmap(f(dg), in_dims=({"x": 0, "y": [0]},))({"x": a, "y": [b]}, scale=3.0)
    want = torch.func.vmap(f(torch), in_dims=({"x": 0, "y": [0]},))({"x": ta, "y": [tb]}, scale=3.0)
    _close(got, want)


def test_vmap_of_vmap_and_of_grad_gives_per_sample_gradients():
    (w, x, y), (tw, tx, ty) = _pair((3,), (6, 3), (6,))

    def loss(lib):
        return lambda w, x, y: (lib.tanh(x @ w) - y) ** 2
    got = dgf.vmap(dgf.grad(loss(dg)), in_dims=(None, 0, 0))(w, x, y)
    want = torch.func.vmap(torch.func.grad(loss(torch)), in_dims=(None, 0, 0))(tw, tx, ty)
    _close(got, want)
    outer = dgf.vmap(dgf.vmap(lambda p, q: p * q, (0, None)), (None, 0))(x[:, 0], x[0])
    touter = torch.func.vmap(torch.func.vmap(lambda p, q: p * q, (0, None)), (None, 0))(
        tx[:, 0], tx[0])
    _close(outer, touter)


def test_model_ensembling_and_training_through_stacked_state():
    def models(lib):
        lib.manual_seed(0)
        ms = [lib.nn.Sequential(lib.nn.Linear(4, 5), lib.nn.ReLU(), lib.nn.Linear(5, 2))
              for _ in range(3)]
        return ms
    ours, theirs = models(dg), models(torch)
    for m, t in zip(ours, theirs):
        m.load_state_dict({k: dg.tensor(v.numpy()) for k, v in t.state_dict().items()})
    (x,), (tx,) = _pair((7, 4))
    x, tx = x.float(), tx.float()

    def run(lib, fn, ms, x):
        params, buffers = fn.stack_module_state(ms)
        base = ms[0]
        out = fn.vmap(lambda p, b, x: fn.functional_call(base, (p, b), (x,)),
                      in_dims=(0, 0, None))(params, buffers, x)
        out.square().sum().backward()
        return out, {k: v.grad for k, v in params.items()}
    got, tgot = run(dg, dgf, ours, x), run(torch, torch.func, theirs, tx)
    _close(got, tgot)


def test_functional_call_tied_weights_strict_and_restores():
    def build(lib):
        lib.manual_seed(0)
        m = lib.nn.Sequential(lib.nn.Embedding(5, 3), lib.nn.Linear(3, 5, bias=False))
        m[1].weight = m[0].weight       # tied, as a language model's decoder
        return m
    ours, theirs = build(dg), build(torch)
    ours.load_state_dict({k: dg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    w = np.arange(15, dtype=np.float32).reshape(5, 3) / 10
    idx = [1, 3]
    got = dgf.functional_call(ours, {"0.weight": dg.tensor(w)}, dg.tensor(idx))
    want = torch.func.functional_call(theirs, {"0.weight": torch.tensor(w)}, torch.tensor(idx))
    _close(got, want)
    assert ours[0].weight is ours[1].weight and isinstance(ours[0].weight, dg.nn.Parameter)
    with pytest.raises(RuntimeError, match="missing keys"):
        dgf.functional_call(ours, {"0.weight": dg.tensor(w)}, dg.tensor(idx), strict=True,
                            tie_weights=False)
    with pytest.raises(ValueError, match="tied"):
        dgf.functional_call(ours, {"0.weight": dg.tensor(w), "1.weight": dg.tensor(w)},
                            dg.tensor(idx))


def test_vmap_randomness_modes():
    x = dg.zeros(4, 3)
    with pytest.raises(RuntimeError, match="randomness"):
        dgf.vmap(lambda r: r + dg.rand(3))(x)
    same = dgf.vmap(lambda r: r + dg.rand(3), randomness="same")(x)
    assert bool((same == same[0]).all())
    different = dgf.vmap(lambda r: r + dg.rand(3), randomness="different")(x)
    assert not bool((different == different[0]).all())


def test_vmap_errors_name_the_problem():
    with pytest.raises(ValueError, match="different sizes"):
        dgf.vmap(lambda a, b: a + b)(dg.zeros(3), dg.zeros(4))
    with pytest.raises(ValueError, match="at least one input"):
        dgf.vmap(lambda a: a, in_dims=None)(dg.zeros(3))
    with pytest.raises(ValueError, match="out_dims is None"):
        dgf.vmap(lambda a: a, out_dims=None)(dg.arange(3.0))
    with pytest.raises(RuntimeError, match="one element"):
        dgf.grad(lambda a: a * 2)(dg.ones(3))
    with pytest.raises(TypeError, match="floating-point"):
        dgf.grad(lambda a: a.sum())(dg.ones(3, dtype=dg.int64))


def test_vmap_over_an_empty_batch():
    got = dgf.vmap(lambda a: a * 2)(dg.zeros(0, 3))
    want = torch.func.vmap(lambda a: a * 2)(torch.zeros(0, 3))
    assert tuple(got.shape) == tuple(want.shape)


def test_transforms_compiled_equal_eager():
    (w, x, y), _ = _pair((3,), (6, 3), (6,))
    w, x, y = w.float(), x.float(), y.float()

    def step(w, x, y):
        per_sample = dgf.vmap(dgf.grad(lambda w, x, y: ((x @ w).tanh() - y) ** 2),
                              in_dims=(None, 0, 0))(w, x, y)
        return per_sample.norm(dim=1), dgf.hessian(lambda w: (x @ w).sin().sum())(w)
    eager = step(w, x, y)
    compiled = dg.compile(step)
    for _ in range(2):
        got = compiled(w, x, y)
    for g, e in zip(got, eager):
        np.testing.assert_array_equal(g.numpy(), e.numpy())


@pytest.mark.parametrize("name", ["jacobian", "hessian", "vjp", "jvp", "vhp", "hvp"])
def test_autograd_functional_matches_torch(name):
    (a, b, v), (ta, tb, tv) = _pair((3,), (3,), (3,))
    AF, TF = dg.autograd.functional, torch.autograd.functional
    if name == "jacobian":
        _close(AF.jacobian(f_vector_1d(dg), (a, b)), TF.jacobian(f_vector_1d(torch), (ta, tb)))
        _close(AF.jacobian(lambda x: x.exp(), a), TF.jacobian(lambda x: x.exp(), ta))
        _close(AF.jacobian(lambda x, y: (x * y, x + 0 * y), (a, b)),
               TF.jacobian(lambda x, y: (x * y, x + 0 * y), (ta, tb)))
    elif name == "hessian":
        _close(AF.hessian(f_scalar(dg), (a, b)), TF.hessian(f_scalar(torch), (ta, tb)))
    elif name in ("vjp", "jvp"):
        _close(getattr(AF, name)(f_vector_1d(dg), (a, b), v if name == "vjp" else (v, v)),
               getattr(TF, name)(f_vector_1d(torch), (ta, tb), tv if name == "vjp" else (tv, tv)))
    else:
        _close(getattr(AF, name)(f_scalar(dg), (a, b), (v, v)),
               getattr(TF, name)(f_scalar(torch), (ta, tb), (tv, tv)))


def f_vector_1d(lib):
    return lambda x, y: lib.tanh(x * y) * x.sum()


def test_autograd_functional_create_graph_and_strict():
    (a,), (ta,) = _pair((3,))
    a.requires_grad_(True), ta.requires_grad_(True)
    j = dg.autograd.functional.jacobian(lambda x: x ** 3, a, create_graph=True)
    tj = torch.autograd.functional.jacobian(lambda x: x ** 3, ta, create_graph=True)
    j.sum().backward(), tj.sum().backward()
    _close(a.grad, ta.grad)
    with pytest.raises(RuntimeError, match="independent"):
        dg.autograd.functional.jacobian(lambda x, y: x * 2, (a, a.detach()), strict=True)
    zeros = dg.autograd.functional.jacobian(lambda x, y: x * 2, (a, a.detach()))[1]
    assert not bool(zeros.any())


def test_autograd_grad_is_grads_batched():
    (a,), (ta,) = _pair((3,))
    a.requires_grad_(True), ta.requires_grad_(True)
    got = dg.autograd.grad(a.sin() * a, a, dg.eye(3, dtype=dg.float64), is_grads_batched=True)
    want = torch.autograd.grad(ta.sin() * ta, ta, torch.eye(3, dtype=torch.float64),
                               is_grads_batched=True)
    _close(got, want)


def test_tensors_written_into_a_compiled_modules_registries_are_seen():
    """functional_call (and code writing ``module._parameters[name]`` directly) on a
    compiled module: each call computes with the tensors given, never a previous call's
    (they bypass ``__setattr__``; the registries count the change themselves).
    functional_call compiles the module's functional form, the tensors its arguments: one
    graph per grad mode, not one per set of tensors; gradients reach the tensors given."""
    model = dg.nn.Linear(3, 2)
    compiled = dg.compile(model)
    x = dg.randn(4, 3)
    for grad_mode in (True, False):
        with dg.set_grad_enabled(grad_mode):
            for _ in range(3):
                w, b = dg.randn(2, 3), dg.randn(2)
                got = dgf.functional_call(compiled, {"weight": w, "bias": b}, (x,))
                np.testing.assert_allclose(got.detach().numpy(), (x @ w.t() + b).numpy(),
                                           rtol=1e-6)
    assert len(compiled._functional_form.cache) == 2
    w = dg.randn(2, 3, requires_grad=True)
    dgf.functional_call(compiled, {"weight": w}, (x,)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.tile(x.sum(0).numpy(), (2, 1)), rtol=1e-6)
    for _ in range(3):
        w = dg.randn(2, 3)
        model._parameters["weight"] = w
        np.testing.assert_allclose(compiled(x).detach().numpy(),
                                   (x @ w.t() + model.bias).detach().numpy(), rtol=1e-6)
