"""``Tensor.view(dtype)``: the bytes reinterpreted as torch does (the shape kept for a dtype
of the same size, else the last dim scaled), never differentiable, eager and compiled."""
import numpy as np
import pytest
import torch

import dualgraph as dg

PAIRS = [("float32", "int32"), ("float32", "float16"), ("float32", "bfloat16"),
         ("float32", "float64"), ("float32", "int64"), ("float32", "bool"),
         ("float64", "int64"), ("float64", "float32"), ("int64", "float64"),
         ("int32", "float32"), ("float16", "bfloat16"), ("float16", "float32"),
         ("bfloat16", "float16"), ("int64", "int32")]


def _source(dtype, shape=(3, 4)):
    rng = np.random.default_rng(0)
    base = torch.tensor(rng.standard_normal(shape) * 100, dtype=torch.float64)
    if dtype in ("int32", "int64"):
        return base.round().to(getattr(torch, dtype))
    return base.to(getattr(torch, dtype))


def _ours(t):
    if t.dtype == torch.bfloat16:   # (NumPy can't hold torch's bfloat16)
        return dg.tensor(t.float().numpy()).to(dg.bfloat16)
    return dg.tensor(t.numpy())


def _numpy(t):
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("src, dst", PAIRS)
def test_view_dtype_matches_torch(src, dst):
    t = _source(src)
    ref = t.view(getattr(torch, dst))
    for fn in (lambda x: x.view(getattr(dg, dst)),
               dg.compile(lambda x: x.view(getattr(dg, dst)))):
        got = fn(_ours(t))
        assert tuple(got.shape) == tuple(ref.shape)
        assert str(got.dtype).split(".")[-1] == dst
        if dst == "bfloat16":
            np.testing.assert_array_equal(got.view(dg.float16).numpy().view(np.int16),
                                          _numpy(ref))
        elif dst == "bool":
            np.testing.assert_array_equal(got.numpy().view(np.uint8) != 0, ref.numpy())
        else:
            np.testing.assert_array_equal(got.numpy(), _numpy(ref))


def test_view_dtype_is_not_differentiable_as_in_torch():
    x = dg.randn(2, 4, requires_grad=True)
    for dt in (dg.float32, dg.int32, dg.float16):
        assert x.view(dt).requires_grad is False and x.view(dt).grad_fn is None
    tx = torch.randn(2, 4, requires_grad=True)
    assert tx.view(torch.float32).requires_grad is False


def test_view_dtype_errors_as_torch():
    with pytest.raises(ValueError, match="last dim must be contiguous"):
        dg.randn(4, 2).t().view(dg.float16)
    with pytest.raises(ValueError, match="must be divisible by 2"):
        dg.randn(3).view(dg.float64)
    with pytest.raises(ValueError, match="0-d tensor"):
        dg.tensor(1.0).view(dg.float16)
    # the same element size needs no contiguous last dim
    t = torch.randn(4, 2)
    got = dg.tensor(t.numpy()).t().view(dg.int32)
    np.testing.assert_array_equal(got.numpy(), t.t().view(torch.int32).numpy())


def test_view_dtype_in_a_compiled_computation_and_float_bits_tricks():
    """The exponent bits of a float, as code that inspects floats computes them."""
    def exponent(x):
        return ((x.view(dg.int32) >> 23) & 255) - 127

    x = dg.tensor([1.0, 2.0, 0.375, 1e10])
    np.testing.assert_array_equal(exponent(x).numpy(), [0, 1, -2, 33])
    np.testing.assert_array_equal(dg.compile(exponent)(x).numpy(), [0, 1, -2, 33])
    y = dg.randn(3, 8, requires_grad=True)
    loss = dg.compile(lambda y: (y * y.view(dg.float16).float().view(3, 8, 2)[..., 0]
                                 .nan_to_num()).sum())(y)
    loss.backward()
    assert y.grad is not None and y.grad.shape == (3, 8)


@pytest.mark.parametrize("dst", ["int32", "float16", "float64", "int64"])
def test_view_dtype_shares_memory_as_torch(dst):
    """Writes through the view reach the tensor, and the tensor's later writes reach the
    view, as torch's; the view has no autograd link to it (the gradient is unchanged)."""
    t = torch.arange(8.0).reshape(2, 4)
    ours = dg.tensor(t.numpy())
    tv, ov = t.view(getattr(torch, dst)), ours.view(getattr(dg, dst))
    tv[0, 0] = 7
    ov[0, 0] = 7
    np.testing.assert_array_equal(ours.numpy(), t.numpy())
    t.add_(1.5)
    ours.add_(1.5)
    np.testing.assert_array_equal(ov.numpy(), tv.numpy())
    a = dg.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = a * 2
    x.view(getattr(dg, dst)).zero_()
    x.sum().backward()
    np.testing.assert_array_equal(x.detach().numpy(), np.zeros(4, np.float32))
    np.testing.assert_array_equal(a.grad.numpy(), [2.0] * 4)


def test_view_dtype_under_compile_equals_eager_or_breaks():
    """A compiled function reads the bits the tensor holds when the view is read (a write
    to the tensor after the view was made is seen), and a write through the view is a
    graph break: the function runs eagerly, with eager's results."""
    def read_after_write(x):
        bits = x.view(dg.int32)
        x.mul_(2.0)
        return bits >> 23

    def write_through(x):
        x.view(dg.int32).add_(1)
        return x * 1.0

    for fn in (read_after_write, write_through):
        compiled = dg.compile(fn)
        for _ in range(3):
            a, b = dg.tensor([1.0, 3.0, 0.5]), dg.tensor([1.0, 3.0, 0.5])
            with pytest.warns(UserWarning, match="graph break") if (
                    fn is write_through and _ == 0) else _no_warning():
                got = compiled(a)
            want = fn(b)
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def _no_warning():
    import contextlib
    return contextlib.nullcontext()
