"""W5 fused_elementwise: forward only, an elementwise chain ending in a LayerNorm.

x: 4096x1024 float32; ``y = layer_norm(gelu_tanh(x * a + b) + x)`` with a, b of shape 1024
and the LayerNorm's affine weight and bias. Nothing here needs more than reading x once and
writing y once, so a fusing compiler approaches the memory-bandwidth roofline (the runner
divides ``BYTES`` by the step time and by the measured copy bandwidth) while an op-by-op
executor writes and rereads a 16 MB temporary per op.

dualgraph and torch share one definition, written once against the torch-style API. The
value compared across implementations is the sum of |y| over the last row, taken in NumPy:
cheap next to the step and sensitive to every op.
"""
import numpy as np

from .common import torch_style_impls

ID, NAME = "W5", "fused_elementwise"
# Steps of 3-30 ms: as W1's (jax.jit's first 20 steps 5.7 ms, then ~4.7 ms).
WARMUP, TIMED = 100, 100
ROWS, COLS = 4096, 1024
EPS = 1e-5
BYTES = 2 * ROWS * COLS * 4          # read x once, write y once


def make_data():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((ROWS, COLS), dtype=np.float32),
            **{k: rng.uniform(0.5, 1.5, COLS).astype(np.float32) for k in ("a", "weight")},
            **{k: rng.uniform(-0.5, 0.5, COLS).astype(np.float32) for k in ("b", "bias")}}


def build(lib, data):
    """The forward function and its inputs, in dualgraph or torch."""
    F = lib.nn.functional
    a, b, weight, bias = (lib.tensor(data[k]) for k in ("a", "b", "weight", "bias"))

    def forward(x):
        h = F.gelu(x * a + b, approximate="tanh") + x
        return F.layer_norm(h, (COLS,), weight, bias, EPS)
    return forward, lib.tensor(data["x"])


def check(y):
    return np.abs(np.asarray(y[-1])).sum()


def jax_jit(data):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def forward(x, a, b, weight, bias):
        h = jax.nn.gelu(x * a + b, approximate=True) + x
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / jnp.sqrt(var + EPS) * weight + bias

    args = [jnp.asarray(data[k]) for k in ("x", "a", "b", "weight", "bias")]
    return lambda: float(check(forward(*args)))


IMPLS = {**torch_style_impls(build, check=check), "jax_jit": jax_jit}
