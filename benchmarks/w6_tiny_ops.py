"""W6 tiny_ops: per-operation overhead.

x: 16 floats with grad; 500 iterations of ``x = x * 0.999 + 0.001 * sin(x)``, then sum and
backward. Every step is ~2000 forward and ~2500 backward ops on 16 numbers, so the time is
almost all framework overhead (dispatch, autograd bookkeeping), not arithmetic.
"""
import numpy as np

ID, NAME = "W6", "tiny_ops"
ITERATIONS = 500


def make_data():
    return {"x": np.random.default_rng(0).random(16).astype(np.float32)}


def dualgraph_eager(data):
    import dualgraph as dg

    x0 = dg.tensor(data["x"], requires_grad=True)

    def step():
        x = x0
        for _ in range(ITERATIONS):
            x = x * 0.999 + 0.001 * dg.sin(x)
        loss = x.sum()
        loss.backward()
        x0.grad = None
        return loss.item()
    return step


def torch_eager(data):
    import torch

    x0 = torch.tensor(data["x"], requires_grad=True)

    def step():
        x = x0
        for _ in range(ITERATIONS):
            x = x * 0.999 + 0.001 * torch.sin(x)
        loss = x.sum()
        loss.backward()
        x0.grad = None
        return loss.item()
    return step


def jax_jit(data):
    import jax
    import jax.numpy as jnp

    def f(x):
        for _ in range(ITERATIONS):
            x = x * 0.999 + 0.001 * jnp.sin(x)
        return x.sum()
    grad_fn = jax.jit(jax.value_and_grad(f))
    x0 = jnp.asarray(data["x"])

    def step():
        loss, g = grad_fn(x0)
        g.block_until_ready()
        return float(loss)
    return step


IMPLS = {"dualgraph_eager": dualgraph_eager, "torch_eager": torch_eager, "jax_jit": jax_jit}
