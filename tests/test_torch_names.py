"""The PyTorch names real programs use (issue 24), each against torch 2.x by value: devices
and the CPU-only answers of torch.cuda / torch.backends / torch.accelerator, the Tensor
methods and top-level functions programs call, and compiled == eager for the tensor ops.
The ops' values and gradients are also rows of tests/optable/."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import nn
from dualgraph.kernels import tuning


def same(got, want, rtol=1e-6, atol=1e-7):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    got = got.detach().numpy() if isinstance(got, dg.Tensor) else np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- devices -------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("cpu",), ("cuda",), ("cuda:1",), ("cuda", 2), ("mps",),
                                  ("cpu", 0)])
def test_device_objects_match_torch(args):
    d, t = dg.device(*args), torch.device(*args)
    assert (repr(d), str(d), d.type, d.index) == (repr(t), str(t), t.type, t.index)
    assert d == dg.device(str(t)) and hash(d) == hash(dg.device(str(t)))
    assert (d == "cpu") == (t == "cpu")   # as torch: a device never equals a string


def test_device_rejects_bad_names():
    for bad in ("cuda:x", "", "cu da"):
        with pytest.raises(ValueError):
            dg.device(bad)
    with pytest.raises(ValueError):
        dg.device("cuda:0", 1)


CREATORS = [
    lambda device: dg.zeros(2, device=device), lambda device: dg.ones(2, device=device),
    lambda device: dg.empty(2, device=device), lambda device: dg.full((2,), 1.0, device=device),
    lambda device: dg.arange(3, device=device), lambda device: dg.linspace(0, 1, 3, device=device),
    lambda device: dg.eye(2, device=device), lambda device: dg.rand(2, device=device),
    lambda device: dg.randn(2, device=device), lambda device: dg.randint(5, (2,), device=device),
    lambda device: dg.randperm(3, device=device), lambda device: dg.tensor([1.0], device=device),
    lambda device: dg.as_tensor([1.0], device=device),
    lambda device: dg.zeros_like(dg.ones(2), device=device),
    lambda device: dg.ones_like(dg.ones(2), device=device),
    lambda device: dg.empty_like(dg.ones(2), device=device),
    lambda device: dg.full_like(dg.ones(2), 3.0, device=device),
    lambda device: dg.rand_like(dg.ones(2), device=device),
    lambda device: dg.randn_like(dg.ones(2), device=device),
    lambda device: dg.ones(2).new_zeros(2, device=device),
    lambda device: dg.ones(2).new_tensor([1.0], device=device),
]


@pytest.mark.parametrize("make", CREATORS)
def test_every_creation_function_takes_device(make):
    for device in ("cpu", dg.device("cpu"), "cpu:0", None):
        assert make(device).device == dg.device("cpu")
    for device in ("cuda", dg.device("cuda", 0), "mps", 0):
        with pytest.raises(ValueError, match="not available.*CPU only"):
            make(device)


def test_generator_takes_a_device():
    for args, kwargs in (((), {"device": "cpu"}), (("cpu",), {}), ((dg.device("cpu"),), {})):
        g = dg.Generator(*args, **kwargs)
        assert g.device == dg.device("cpu") and repr(g.device) == repr(torch.Generator().device)
        assert g.manual_seed(3).initial_seed() == 3
    with pytest.raises(ValueError, match="not available"):
        dg.Generator(device="cuda")


def test_float_creators_keep_requires_grad():
    for make in (dg.zeros, dg.ones, dg.empty, dg.rand, dg.randn):
        assert make(2, device="cpu", requires_grad=True).requires_grad
    for make in (dg.zeros_like, dg.rand_like, dg.randn_like):
        assert make(dg.ones(2), device="cpu", requires_grad=True).requires_grad


def test_tensor_device_methods():
    x = dg.ones(2, 3)
    assert x.device == dg.device("cpu") and repr(x.device) == repr(torch.ones(1).device)
    assert not x.is_cuda and x.is_cpu and x.get_device() == torch.ones(1).get_device()
    assert x.cpu() is x and x.to("cpu") is x and x.to(dg.device("cpu")) is x
    assert x.pin_memory() is x
    assert x.to(device="cpu", dtype=dg.float64).dtype == dg.float64
    assert x.to("cpu", dg.float16).dtype == dg.float16
    assert x.to(dg.device("cpu"), dg.int64).dtype == dg.int64
    assert x.to(dg.tensor([1])).dtype == dg.int64
    copied = x.to("cpu", copy=True)
    assert copied is not x and np.array_equal(copied.numpy(), x.numpy())
    with pytest.raises(ValueError, match="'cuda' is not available"):
        x.cuda()
    with pytest.raises(ValueError, match="'cuda:1' is not available"):
        x.to("cuda:1")
    with pytest.raises(ValueError, match="not available"):
        x.to(device=dg.device("mps"))


def test_module_device_moves():
    net = nn.Linear(2, 3, device=dg.device("cpu"))
    assert net.to(dg.device("cpu")) is net and net.cpu() is net
    assert net.to(dg.device("cpu"), dg.float64).weight.dtype == dg.float64
    with pytest.raises(ValueError, match="not available"):
        net.cuda()
    with pytest.raises(ValueError, match="not available"):
        net.to(dg.device("cuda"))
    with pytest.raises(ValueError, match="not available"):
        nn.Linear(2, 3, device="cuda")


def test_the_usual_device_choice_runs():
    device = dg.device("cuda" if dg.cuda.is_available() else "cpu")
    model = nn.Linear(2, 1).to(device)
    x = dg.randn(4, 2, device=device)
    assert model(x.to(device)).shape == (4, 1)


def test_cuda_queries_answer_as_a_cpu_only_torch():
    for name in ("is_available", "device_count", "is_initialized", "is_bf16_supported",
                 "memory_allocated", "max_memory_allocated", "memory_reserved", "empty_cache"):
        assert getattr(dg.cuda, name)() == getattr(torch.cuda, name)(), name
    assert dg.cuda.manual_seed(0) is None and dg.cuda.manual_seed_all(0) is None
    for name in ("synchronize", "current_device", "get_device_name", "get_device_properties"):
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            getattr(dg.cuda, name)()


def test_backends_and_accelerator_match_a_cpu_only_torch():
    b, tb = dg.backends, torch.backends
    assert b.cudnn.is_available() == tb.cudnn.is_available()
    for flag in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(b.cudnn, flag) == getattr(tb.cudnn, flag), flag
    assert b.cuda.matmul.allow_tf32 == tb.cuda.matmul.allow_tf32
    assert b.cuda.is_built() == tb.cuda.is_built()
    assert b.mps.is_available() == tb.mps.is_available() and b.mps.is_built() is False
    saved = b.cudnn.benchmark
    b.cudnn.benchmark = True           # programs set these; they hold what is set
    b.cuda.matmul.allow_tf32 = True
    assert b.cudnn.benchmark and b.cuda.matmul.allow_tf32
    b.cudnn.benchmark, b.cuda.matmul.allow_tf32 = saved, False
    b.cuda.enable_flash_sdp(False)
    assert not b.cuda.flash_sdp_enabled()
    b.cuda.enable_flash_sdp(True)
    import dualgraph.backends.cudnn as cudnn   # noqa: F401  (torch's import form)
    assert dg.accelerator.is_available() == torch.accelerator.is_available()
    assert dg.accelerator.current_accelerator() == torch.accelerator.current_accelerator()
    assert dg.accelerator.device_count() == torch.accelerator.device_count()
    dg.set_float32_matmul_precision("high")
    assert dg.get_float32_matmul_precision() == "high"
    dg.set_float32_matmul_precision("highest")


# -- creation forms --------------------------------------------------------------------------
@pytest.mark.parametrize("args,kwargs", [((10, (3,)), {}), ((2, 5, (2, 2)), {}),
                                         ((3,), {"size": (4,)}), ((1, 4), {"size": (2,)}),
                                         ((7, (2,)), {"dtype": "int32"})])
def test_randint_forms(args, kwargs):
    d_kwargs = {k: getattr(dg, v) if k == "dtype" else v for k, v in kwargs.items()}
    t_kwargs = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    got, want = dg.randint(*args, **d_kwargs), torch.randint(*args, **t_kwargs)
    assert tuple(got.shape) == tuple(want.shape) and str(got.dtype) == str(want.dtype).replace(
        "torch", "dualgraph")
    low, high = (0, args[0]) if len(args) == 2 and isinstance(args[1], tuple) or len(
        args) == 1 else (args[0], args[1])
    assert ((got.numpy() >= low) & (got.numpy() < high)).all()


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_creation_takes_size_as_torch_does(name):
    """``torch.empty(size=(2, 3))`` (as graph-attention code writes its parameters), the
    dims one by one, or as one tuple; both at once is refused as torch refuses it."""
    for args, kwargs in [((2, 3), {}), (((2, 3),), {}), ((), {"size": (2, 3)}),
                         ((), {"size": [2, 3]})]:
        got, want = getattr(dg, name)(*args, **kwargs), getattr(torch, name)(*args, **kwargs)
        assert tuple(got.shape) == tuple(want.shape) == (2, 3)
    if name in ("zeros", "ones"):
        np.testing.assert_array_equal(getattr(dg, name)(size=(2,)).numpy(),
                                      getattr(torch, name)(size=(2,)).numpy())
    with pytest.raises(TypeError, match="given twice"):
        getattr(dg, name)(2, size=(3,))


def test_new_tensor_methods_match_torch():
    for src in ([1, 2], [1.5, -2.0]):
        d, t = dg.tensor(src), torch.tensor(src)
        same(d.new_zeros(2, 3), t.new_zeros(2, 3))
        same(d.new_ones((2,)), t.new_ones((2,)))
        same(d.new_full((2, 2), 3), t.new_full((2, 2), 3))
        same(d.new_tensor([1.7, 2.2]), t.new_tensor([1.7, 2.2]))
        assert d.new_empty(3).dtype == d.dtype and tuple(d.new_empty(3).shape) == (3,)
        same(d.new_zeros(2, dtype=dg.float64), t.new_zeros(2, dtype=torch.float64))
    assert dg.ones(1).new_ones(2, requires_grad=True).requires_grad


@pytest.mark.parametrize("name", ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor",
                                  "BoolTensor", "HalfTensor", "BFloat16Tensor"])
def test_typed_constructors_match_torch(name):
    d, t = getattr(dg, name), getattr(torch, name)
    assert str(d([1, 0, 1]).dtype).split(".")[1] == str(t([1, 0, 1]).dtype).split(".")[1]
    if name != "BFloat16Tensor":
        same(d([[1, 0], [2, 3]]), t([[1, 0], [2, 3]]))
    assert tuple(d(2, 3).shape) == tuple(t(2, 3).shape) and tuple(d().shape) == (0,)
    assert isinstance(dg.tensor([1, 0]).to(d.dtype), d)
    assert isinstance(dg.ones(1), dg.FloatTensor) and not isinstance(dg.ones(1), dg.LongTensor)


@pytest.mark.parametrize("args", [(2, 3), (5,), (), ([1, 2],), ((2, 3),), ([True],),
                                  (np.array([1, 2]),), ([[1.5, 2.0]],)])
def test_legacy_tensor_constructor_matches_torch(args):
    """``torch.Tensor(h, d_k)`` (a relative-attention bias, then ``xavier_uniform_``) raised
    a TypeError; ``torch.Tensor([1, 2])`` was int64 here (float32 in torch) and
    ``torch.Tensor(5)`` a 0-d tensor (five elements in torch)."""
    d, t = dg.Tensor(*args), torch.Tensor(*args)
    assert tuple(d.shape) == tuple(t.shape) and str(d.dtype)[10:] == str(t.dtype)[6:]
    if d.numel() and not (args and isinstance(args[0], int)):   # (sizes: uninitialised)
        same(d, t)
    assert dg.Tensor(dg.Size([2, 3])).shape == (2, 3)
    assert dg.Tensor(dg.ones(2, dtype=dg.int64)).dtype == dg.int64


# -- Tensor methods and top-level functions ------------------------------------------------
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "nearest", "midpoint"])
@pytest.mark.parametrize("q,dim,keepdim", [(0.3, None, False), ([0.25, 0.5, 0.9], 1, True),
                                           (1.0, 0, False), ([0.0, 0.5], None, True)])
def test_quantile_matches_torch(q, dim, keepdim, interpolation):
    """``torch.quantile`` was missing (tabular code bins a column at its quartiles with it
    and ``bucketize``); values, shapes and the gradient as torch's."""
    x = np.random.default_rng(0).normal(size=(4, 7)).astype(np.float32)
    xd, xt = dg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got = dg.quantile(xd, dg.tensor(q) if isinstance(q, list) else q, dim=dim,
                      keepdim=keepdim, interpolation=interpolation)
    want = torch.quantile(xt, torch.tensor(q), dim=dim, keepdim=keepdim,
                          interpolation=interpolation)
    same(got, want)
    got.sum().backward()
    want.sum().backward()
    same(xd.grad, xt.grad)
    same(dg.compile(lambda t: t.quantile(q, dim=dim, keepdim=keepdim,
                                         interpolation=interpolation))(xd), want)


def test_format_matches_torch():
    for value in (0.123456, 3, True):
        d, t = dg.tensor(value), torch.tensor(value)
        for spec in ("", ".2f", ">10", ".3e") if value is not True else ("",):
            if isinstance(value, int) and spec in (".2f", ".3e"):
                continue
            assert format(d, spec) == format(t, spec)
    assert f"{dg.tensor(2.5):.4f}" == "2.5000"
    assert format(dg.tensor([1.0, 2.0])) == str(dg.tensor([1.0, 2.0]))
    with pytest.raises(TypeError):
        format(dg.tensor([1.0, 2.0]), ".2f")   # as torch: only 0-d tensors take a spec


@pytest.mark.parametrize("make", [
    lambda m: m.zeros(3, 4), lambda m: m.zeros(3, 4).t(), lambda m: m.zeros(2, 3)[:, ::2],
    lambda m: m.zeros(3, 1).expand(3, 4), lambda m: m.zeros(2, 3, 4).permute(2, 0, 1),
    lambda m: m.zeros(4, 5)[1:3], lambda m: m.zeros(3, 1).t(), lambda m: m.zeros(()),
])
def test_stride_and_is_contiguous_match_torch(make):
    d, t = make(dg), make(torch)
    assert d.stride() == t.stride() and d.stride(0 if d.ndim else None) == (
        t.stride(0) if t.ndim else t.stride())
    assert d.is_contiguous() == t.is_contiguous()
    assert d.contiguous().is_contiguous()


def test_copy_matches_torch():
    for lib in (dg, torch):
        base = lib.zeros(2, 3)
        view = base[1]
        view.copy_(lib.tensor([1, 2, 3]))            # an int source into a float view
        src = lib.tensor([0.5, 1.5, 2.5], requires_grad=True)
        out = (lib.ones(2, 3, requires_grad=True) * 2).copy_(src)   # broadcast, history cut
        (out * lib.arange(6.0).reshape(2, 3)).sum().backward()
        if lib is dg:
            got = (base, out, src.grad)
        else:
            want = (base, out, src.grad)
    for g, w in zip(got, want):
        same(g, w)
    with pytest.raises(ValueError, match="does not broadcast"):
        dg.zeros(3).copy_(dg.zeros(2, 3))


def test_top_level_predicates_match_torch():
    a, b = np.array([1.0, 2.0, np.nan, np.inf]), np.array([1.0 + 1e-7, 2.1, np.nan, np.inf])
    for kwargs in ({}, {"equal_nan": True}, {"rtol": 0.1}, {"atol": 0.2, "rtol": 0}):
        same(dg.isclose(dg.tensor(a), dg.tensor(b), **kwargs),
             torch.isclose(torch.tensor(a), torch.tensor(b), **kwargs))
        assert dg.allclose(dg.tensor(a), dg.tensor(b), **kwargs) == torch.allclose(
            torch.tensor(a), torch.tensor(b), **kwargs)
    for x, y in (([1, 2], [1, 2]), ([1, 2], [1, 3]), ([1, 2], [[1, 2]]), ([1.0], [1])):
        assert dg.equal(dg.tensor(x), dg.tensor(y)) == torch.equal(torch.tensor(x),
                                                                  torch.tensor(y))
    assert dg.is_tensor(dg.ones(1)) and dg.is_tensor(nn.Parameter(dg.ones(1)))
    assert not dg.is_tensor([1.0]) and not dg.is_tensor(np.ones(1))
    assert dg.numel(dg.ones(2, 3)) == torch.numel(torch.ones(2, 3)) == 6


def test_num_threads_round_trip(monkeypatch):
    # setenv first, so that the fixture puts the variable back (or removes it) afterwards:
    # set_num_threads writes it, and later tests must not inherit it
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")
    blas = tuning.openblas()
    before = blas.threads() if blas else None
    try:
        dg.set_num_threads(3)
        assert dg.get_num_threads() == 3
        if blas:   # one count for both pools: OpenBLAS's threads follow
            assert blas.threads() == 3
        with pytest.raises(ValueError):
            dg.set_num_threads(0)
    finally:
        if blas:
            tuning.share_cores(before)


def test_inference_mode_forms():
    x = dg.ones(2, requires_grad=True)
    with dg.inference_mode():
        assert not dg.is_grad_enabled() and not (x * 2).requires_grad
    with dg.inference_mode(False):
        assert dg.is_grad_enabled()

    @dg.inference_mode()
    def called(v):
        return v * 2

    @dg.inference_mode
    def bare(v):
        return v * 2
    assert not called(x).requires_grad and not bare(x).requires_grad
    assert dg.is_grad_enabled() and (x * 2).requires_grad


@pytest.mark.parametrize("kwargs", [{}, {"return_inverse": True}, {"return_counts": True},
                                    {"return_inverse": True, "return_counts": True},
                                    {"dim": 0, "return_inverse": True},
                                    {"dim": 1, "return_counts": True}])
def test_unique_matches_torch(kwargs):
    data = np.array([[3, 1, 3], [3, 1, 3], [0, 2, 0]])
    if "dim" not in kwargs:
        data = data.astype(np.float32)
    got, want = dg.unique(dg.tensor(data), **kwargs), torch.unique(torch.tensor(data), **kwargs)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        same(g, w)
    same(dg.tensor(data).unique(sorted=True), torch.tensor(data).unique(sorted=True))


def test_repeat_interleave_forms_match_torch():
    for fn in (lambda m: m.tensor([[1, 2], [3, 4]]).repeat_interleave(2),
               lambda m: m.repeat_interleave(m.tensor([2, 0, 1])),
               lambda m: m.tensor([[1, 2], [3, 4]]).repeat_interleave(m.tensor([1, 2]), dim=0),
               lambda m: m.tensor([[1, 2], [3, 4]]).repeat_interleave(m.tensor(3), dim=1)):
        same(fn(dg), fn(torch))


@pytest.mark.parametrize("sizes", [(2, 1), (1, 1), (1, 2), (2, 2, 1), (3, 1, 1)])
def test_repeat_and_tile_copy_as_torch_does(sizes):
    """``repeat`` makes a new tensor: a later write to the source does not show through it,
    and it may be written in place (``style.repeat(b, 1, 1, 1)`` then ``div_``)."""
    results = []
    for m in (dg, torch):
        x = m.arange(3.0).reshape(1, 3)
        y, t = x.repeat(*sizes), x.tile(sizes)
        x.add_(10)
        y.mul_(2)
        results.append((y, t, x))
    for got, want in zip(*results):
        same(got, want)


def test_in_place_random_fills():
    g = dg.Generator(0)
    w = dg.empty(20000).uniform_(-2.0, 3.0, generator=g)
    assert -2.0 <= w.min().item() and w.max().item() < 3.0 and abs(w.mean().item() - 0.5) < 0.05
    n = dg.empty(20000, dtype=dg.float64).normal_(1.0, 2.0)
    assert n.dtype == dg.float64
    assert abs(n.mean().item() - 1.0) < 0.1 and abs(n.std().item() - 2.0) < 0.1
    b = dg.empty(20000).bernoulli_(0.25)
    assert set(np.unique(b.numpy())) <= {0.0, 1.0} and abs(b.mean().item() - 0.25) < 0.02
    p = dg.tensor([0.0, 1.0, 0.0, 1.0])
    same(dg.bernoulli(p), torch.bernoulli(torch.tensor([0.0, 1.0, 0.0, 1.0])))
    same(dg.zeros(4).bernoulli_(p), torch.zeros(4).bernoulli_(torch.tensor([0.0, 1, 0, 1])))
    assert tuple(dg.normal(dg.zeros(2, 3), 1.0).shape) == (2, 3)
    assert tuple(dg.normal(0.0, 1.0, size=(4,)).shape) == (4,)
    leaf = dg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf.uniform_()
    with dg.no_grad():
        view = leaf[1:]
        assert view.normal_() is view
    assert leaf[0].item() == 1.0 and leaf.requires_grad   # the view wrote into the leaf


# -- compiled == eager for the tensor ops ---------------------------------------------------
COMPILED = [
    lambda a, b: dg.atan2(a, b) + dg.erfc(a),
    lambda a, b: dg.lerp(a, b, 0.25).addcmul(a, b, value=2).addcdiv(a, b.abs() + 1),
    lambda a, b: a.clone().lerp_(b, 0.5).addcmul_(a, b).addcdiv_(b, b * b + 1),
    lambda a, b: dg.addmm(a[0], a, b.t(), beta=0.5) + dg.baddbmm(a[None], a[None], b.t()[None]),
    lambda a, b: a.repeat_interleave(2, dim=1).sum(1) + a.unfold(1, 2, 2).sum((1, 2))[:, None],
    lambda a, b: a.new_zeros(a.shape).copy_(b[0]) + a.where(a > 0, b),
    lambda a, b: dg.isclose(a, a + 1e-9).float() + a.type_as(b) * a.new_ones(4),
    lambda a, b: dg.sinh(a) + dg.cosh(b) + dg.nan_to_num(a.log(), nan=-1.0),
    lambda a, b: dg.diag(dg.diag(a, 1), 1) + dg.tensordot(a, b, dims=([1], [0])) + a.diagonal(),
]


@pytest.mark.parametrize("fn", COMPILED)
def test_compiled_matches_eager(fn):
    rng = np.random.default_rng(0)
    a, b = (dg.tensor(rng.standard_normal((4, 4)).astype(np.float32)) for _ in range(2))
    compiled = dg.compile(fn, fullgraph=True)
    for _ in range(2):
        same(compiled(a, b), fn(a, b), rtol=1e-5, atol=1e-6)


def test_random_fill_in_a_compiled_step_draws_fresh_numbers():
    def step(w):
        with dg.no_grad():
            w.uniform_(-1.0, 1.0)
        return w * 1
    w = dg.zeros(100)
    compiled = dg.compile(step, fullgraph=True)
    first, second = compiled(w).numpy().copy(), compiled(w).numpy().copy()
    assert (np.abs(first) <= 1).all() and not np.array_equal(first, second)
    assert np.array_equal(w.numpy(), second)


# -- module paths ----------------------------------------------------------------------------
@pytest.mark.parametrize("statement", [
    "import dualgraph.onnx; dualgraph.onnx.export",
    "from dualgraph import jit; jit.trace",
    "import dualgraph.jit as j; from dualgraph import onnx as o; o.load",
    "from dualgraph.utils.data.dataloader import DataLoader",
    "import dualgraph.utils.data.sampler as s; s.RandomSampler",
    "from dualgraph.nn.modules.linear import Linear",
    "from dualgraph.nn.modules.batchnorm import _BatchNorm",
    "import dualgraph.backends.cudnn as cudnn; cudnn.benchmark = True",
    "import dualgraph.cuda, dualgraph.accelerator",
])
def test_module_paths_import_first_in_a_fresh_interpreter(statement):
    """Each path imported first, before anything else of dualgraph: no import cycle."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", statement], check=True)


def test_torch_module_paths_name_the_same_objects():
    from dualgraph.nn.modules.activation import MultiheadAttention, ReLU
    from dualgraph.nn.modules.batchnorm import _BatchNorm
    from dualgraph.nn.modules.container import Sequential
    from dualgraph.nn.modules.module import Module
    from dualgraph.utils.data.dataloader import DataLoader
    from dualgraph.utils.data.dataset import Dataset
    assert (MultiheadAttention, ReLU, Sequential, Module, DataLoader, Dataset) == (
        nn.MultiheadAttention, nn.ReLU, nn.Sequential, nn.Module, dg.utils.data.DataLoader,
        dg.utils.data.Dataset)
    assert isinstance(nn.BatchNorm2d(3), _BatchNorm) and dg.nn.modules.Linear is nn.Linear
    assert isinstance(torch.nn.BatchNorm2d(3), torch.nn.modules.batchnorm._BatchNorm)


def test_jit_and_onnx_queries(tmp_path):
    assert dg.jit.is_scripting() is torch.jit.is_scripting() is False
    assert dg.jit.ignore(len) is len and dg.jit.unused(len) is len
    seen = []
    dg.compile(lambda x: seen.append(dg.jit.is_tracing()) or x * 2)(dg.ones(2))
    assert seen == [True] and not dg.jit.is_tracing()
    assert dg.onnx.is_in_onnx_export() is torch.onnx.is_in_onnx_export() is False
    seen.clear()
    dg.onnx.export(lambda x: seen.append(dg.onnx.is_in_onnx_export()) or x * 2,
                   (dg.ones(2),), str(tmp_path / "double.onnx"))
    assert seen == [True] and not dg.onnx.is_in_onnx_export()


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_finfo_matches_torch(name):
    ours, theirs = dg.finfo(getattr(dg, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr


def test_iinfo_seeds_and_small_queries_match_torch():
    for name in ("int32", "int64"):
        ours, theirs = dg.iinfo(getattr(dg, name)), torch.iinfo(getattr(torch, name))
        assert (ours.bits, ours.max, ours.min, ours.dtype) == (
            theirs.bits, theirs.max, theirs.min, theirs.dtype)
    assert dg.finfo().eps == torch.finfo().eps
    with pytest.raises(TypeError):
        dg.finfo(dg.int64)
    with pytest.raises(TypeError):
        dg.iinfo(dg.float32)
    dg.manual_seed(7)
    assert dg.initial_seed() == 7
    s = dg.seed()
    assert dg.initial_seed() == s
    x, t = dg.ones(2, 3), torch.ones(2, 3)
    assert (x.nelement(), x.ndimension()) == (t.nelement(), t.ndimension())
    assert dg.is_floating_point(x) == torch.is_floating_point(t)
    assert dg.is_floating_point(dg.tensor([1])) == torch.is_floating_point(torch.tensor([1]))


def test_legacy_type_and_new_match_torch():
    for data in ([1.5, 2.0], [1, 2], [True, False]):
        d, t = dg.tensor(data), torch.tensor(data)
        assert d.type().split(".")[1] == t.type().split(".")[1]
        same(d.type(dg.LongTensor), t.type(torch.LongTensor))
        same(d.type("torch.DoubleTensor"), t.type("torch.DoubleTensor"))
        same(d.type(dg.float32), t.type(torch.float32))
        same(d.new([3, 4]), t.new([3, 4]))
        assert tuple(d.new(2, 3).shape) == tuple(t.new(2, 3).shape)
        assert d.new(2).dtype == d.dtype


def test_exponential_and_random_fills():
    e = dg.empty(20000, dtype=dg.float64).exponential_(2.0, generator=dg.Generator(1))
    assert e.min().item() >= 0 and abs(e.mean().item() - 0.5) < 0.02
    r = dg.empty(2000).random_(3, 7)
    assert r.dtype == dg.float32 and set(np.unique(r.numpy())) == {3.0, 4.0, 5.0, 6.0}
    r = dg.zeros(2000, dtype=dg.int64).random_(4)
    assert set(np.unique(r.numpy())) == {0, 1, 2, 3}


def test_slices_with_tensor_bounds_match_torch():
    """``data[i:i + block]`` with ``i`` drawn by randint (a 0-d tensor), as GPT batches are
    cut."""
    for lib in (dg, torch):
        data = lib.arange(20)
        starts = lib.tensor([3, 0, 11])
        got = lib.stack([data[i:i + 4] for i in starts]), data[starts[0]::starts[0]]
        if lib is dg:
            ours = got
        else:
            same(ours[0], got[0])
            same(ours[1], got[1])


def test_set_printoptions_precision_matches_torch():
    try:
        for kwargs in ({"precision": 2}, {"precision": 6}, {"profile": "short"},
                       {"profile": "default"}):
            dg.set_printoptions(**kwargs)
            torch.set_printoptions(**kwargs)
            for data in ([1.23456789, -2.5], [[0.1, 2.0], [3.33333, 4.0]], [1.0, 2.0]):
                assert repr(dg.tensor(data)) == repr(torch.tensor(data))
        dg.set_printoptions(threshold=5, edgeitems=2)
        assert repr(dg.arange(10)).replace(" ", "") == "tensor([0,1,...,8,9])"
    finally:
        dg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert repr(dg.arange(10)) == repr(torch.arange(10))


def test_view_refuses_a_layout_it_cannot_share_as_torch_does():
    """``x.t().view(-1)`` raised nothing and returned a copy, so writes through it missed
    ``x`` silently; torch raises, pointing at ``reshape``. A view that fits shares."""
    for lib in (torch, dg):
        x = lib.arange(6.0).reshape(2, 3)
        with pytest.raises(RuntimeError, match=r"view size is not compatible.*reshape"):
            x.t().view(-1)
        v = x.t().view(3, 2)          # (the same layout: a view)
        v[0, 0] = 100.0
        assert float(x[0, 0]) == 100.0
        flat = x.view(6)
        flat[1] = -1.0
        assert float(x[0, 1]) == -1.0
        assert x.t().reshape(-1).tolist() == [100.0, 3.0, -1.0, 4.0, 2.0, 5.0]


def test_compiling_a_random_op_does_not_shift_the_eager_stream():
    """Found by the profiler's tests: the compiled graphs' seed was drawn from the eager
    stream (at first use and at every manual_seed), so dg.manual_seed(0) gave other eager
    numbers once a compiled function had drawn random numbers."""
    dg.manual_seed(0)
    fresh = dg.rand(4).tolist()
    w = dg.zeros(3)
    fill = dg.compile(lambda: w.uniform_(-1, 1))
    fill()
    dg.manual_seed(0)
    assert dg.rand(4).tolist() == fresh
    dg.manual_seed(0)
    fill()
    first = w.tolist()
    dg.manual_seed(0)
    fill()
    assert w.tolist() == first            # (and the compiled stream restarts with the seed)
    dg.manual_seed(0)
    assert dg.zeros(3).uniform_(-1, 1).tolist() == first   # (eager draws what it drew)
