"""NumPy next to tensors, as torch has it: NumPy scalars and arrays combined with a tensor
give a tensor that keeps the gradient (``np.log(2) - x``: it gave an array of x's values,
so a loss lost that term's gradient, silently), eager and compiled; and NumPy's argument
names ``axis``/``keepdims`` for ``dim``/``keepdim`` in the torch namespace and Tensor
methods."""
import numpy as np
import pytest
import torch

import dualgraph as dg

SCALAR_FORMS = [lambda a: np.log(2) - a, lambda a: np.float32(2) * a, lambda a: a * np.float64(3),
                lambda a: np.float64(1) / (a + 2), lambda a: np.int64(2) ** a,
                lambda a: (np.float64(0.5) + a) * np.float32(2)]


@pytest.mark.parametrize("form", range(len(SCALAR_FORMS)))
def test_numpy_scalars_with_tensors_keep_the_gradient(form):
    f = SCALAR_FORMS[form]
    x = dg.tensor([0.5, 1.5, -0.25], requires_grad=True)
    tx = torch.tensor([0.5, 1.5, -0.25], requires_grad=True)
    y, ty = f(x), f(tx)
    assert isinstance(y, dg.Tensor) and y.dtype == dg.float32
    y.sum().backward(), ty.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)

    compiled = dg.compile(lambda a: f(a).sum())
    x2 = dg.tensor([0.5, 1.5, -0.25], requires_grad=True)
    compiled(x2).backward()
    np.testing.assert_array_equal(x2.grad.numpy(), x.grad.numpy())
    assert compiled.explain().splitlines()[0].endswith(" 0 graph break(s)")


@pytest.mark.parametrize("call", [
    "lib.sum(x, axis=1)", "x.sum(axis=0, keepdims=True)", "lib.mean(x, axis=-1, keepdims=True)",
    "x.max(axis=1).values", "x.argmax(axis=0)", "lib.cat([x, x], axis=1)", "x.softmax(axis=1)",
    "lib.std(x, axis=0)", "x.cumsum(axis=1)", "lib.amax(x, axis=(0, 1), keepdims=True)",
    "lib.logsumexp(x, axis=1)", "lib.stack([x, x], axis=2)",
    "x.sort(axis=1).values", "lib.var(x, axis=1, keepdims=True)",
])
def test_axis_and_keepdims_are_dim_and_keepdim(call):
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    got = eval(call, {"lib": dg, "x": dg.tensor(values)})
    want = eval(call, {"lib": torch, "x": torch.tensor(values)})
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_a_name_and_its_alias_together_is_an_error():
    with pytest.raises(TypeError, match="alias 'axis'"):
        dg.ones(2, 3).sum(dim=0, axis=1)
