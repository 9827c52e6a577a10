"""W6 tiny_ops: per-operation overhead.

x: 16 floats with grad; 500 iterations of ``x = x * 0.999 + 0.001 * sin(x)``, then sum and
backward. Every step is ~2000 forward and ~2500 backward ops on 16 numbers, so the time is
almost all framework overhead (dispatch, autograd bookkeeping), not arithmetic.
"""
import numpy as np

from .common import torch_style_impls

ID, NAME = "W6", "tiny_ops"
ITERATIONS = 500


def make_data():
    return {"x": np.random.default_rng(0).random(16).astype(np.float32)}


def build(lib, data):
    """The step for dualgraph or torch: the chain, sum, backward; returns the loss."""
    x0 = lib.tensor(data["x"], requires_grad=True)

    def step(x0):
        x = x0
        for _ in range(ITERATIONS):
            x = x * 0.999 + 0.001 * lib.sin(x)
        loss = x.sum()
        x0.grad = None
        loss.backward()
        return loss
    return step, x0


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


# torch.compile of this step ran past 150 s (measured before dualgraph existed, aborted); it
# is left out so a full run stays under the runner's time limit.
IMPLS = {name: impl for name, impl in torch_style_impls(build).items()
         if name != "torch_compile"}
IMPLS["jax_jit"] = jax_jit
