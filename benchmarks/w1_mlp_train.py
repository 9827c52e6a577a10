"""W1 mlp_train: one training step of a 784-512-512-10 ReLU MLP.

Batch 128, cross-entropy, SGD with momentum 0.9 and lr 0.01. Three GEMMs forward and five
backward (the input needs no gradient) dominate, so this shows how close each framework
gets to the BLAS roofline: the runner divides ``FLOPS`` by the step time and by the
measured ``numpy.matmul`` GFLOP/s.

dualgraph and torch share one model definition, written once against the torch-style API
(``lib`` is ``dualgraph`` or ``torch``), so "same model" holds by construction; the
initial weights come from NumPy (``make_data``) and are loaded into every implementation.
"""
from itertools import pairwise

import numpy as np

from .common import torch_style_impls, training_step

ID, NAME = "W1", "mlp_train"
# Steps of ~3 ms: a fresh process of every implementation runs its first ~60-80 steps
# up to 10% slower (measured 2026-12-01: dualgraph compiled 3.26 -> ~3.06 ms, torch
# eager 3.87 -> ~3.45 ms over 200 steps), so all warm up longer to time the steady state.
WARMUP, TIMED = 100, 100
SIZES = (784, 512, 512, 10)
BATCH = 128
LR, MOMENTUM = 0.01, 0.9

# Multiply-adds of the matmuls in one step: forward and weight gradients for every layer,
# input gradients for all but the first layer (the data needs no gradient).
_MACS = sum(i * o for i, o in pairwise(SIZES))
FLOPS = 2 * BATCH * (3 * _MACS - SIZES[0] * SIZES[1])


def make_data():
    """Inputs, labels and the initial weights (torch's default Linear init, drawn once),
    named as in the state dict of the Sequential below."""
    rng = np.random.default_rng(0)
    params = {}
    for layer, (fan_in, fan_out) in enumerate(pairwise(SIZES)):
        bound = 1 / np.sqrt(fan_in)
        params[f"{2 * layer}.weight"] = rng.uniform(-bound, bound, (fan_out, fan_in))
        params[f"{2 * layer}.bias"] = rng.uniform(-bound, bound, fan_out)
    return {"params": {k: v.astype(np.float32) for k, v in params.items()},
            "x": rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32),
            "y": rng.integers(0, SIZES[-1], BATCH).astype(np.int64)}


def build(lib, data):
    """The model, its optimiser and the training step, in dualgraph or torch."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    return training_step(lib, model, data,
                         lambda ps: lib.optim.SGD(ps, lr=LR, momentum=MOMENTUM))


def jax_jit(data):
    """The same network as pure functions; SGD with momentum written out as torch does
    it (buf = momentum * buf + grad; p -= lr * buf)."""
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, y):
        h = x
        for layer in range(3):
            h = h @ params[f"{2 * layer}.weight"].T + params[f"{2 * layer}.bias"]
            if layer < 2:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h, axis=-1)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    @jax.jit
    def train_step(params, bufs, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        bufs = jax.tree_util.tree_map(lambda b, g: MOMENTUM * b + g, bufs, grads)
        params = jax.tree_util.tree_map(lambda p, b: p - LR * b, params, bufs)
        return loss, params, bufs

    state = {"params": {k: jnp.asarray(v) for k, v in data["params"].items()}}
    state["bufs"] = jax.tree_util.tree_map(jnp.zeros_like, state["params"])
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])

    def step():
        loss, state["params"], state["bufs"] = train_step(state["params"], state["bufs"], x, y)
        return float(loss)
    return step


IMPLS = {**torch_style_impls(build), "jax_jit": jax_jit}
