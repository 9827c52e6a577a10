"""W7 mlp_infer_latency: single-sample inference through W1's MLP.

Batch 1, forward only, no gradient tracking: three tiny GEMVs, so the time is almost all
per-call overhead (dispatch, guards, argument handling). The weights are W1's. The value
compared across implementations is the sum of the 10 logits' absolute values, taken in
NumPy so that it adds no framework op to the timed call.

onnxruntime is a peer for this workload once dualgraph can export ONNX; it cannot yet, so
the runner reports that implementation as skipped (``NOTES``).
"""
import numpy as np

from .common import torch_style_impls
from .w1_mlp_train import make_data as w1_data

ID, NAME = "W7", "mlp_infer_latency"
# Steps of a fraction of a millisecond: 25 calls measure the warm-up (the first ~20 calls
# of any implementation are up to 2x slower while caches and Python's specialising
# interpreter settle), so every implementation runs more of them.
WARMUP, TIMED = 100, 200
NOTES = {"onnxruntime": "skipped: dualgraph has no ONNX export yet"}


def make_data():
    data = w1_data()
    return {"params": data["params"], "x": data["x"][:1]}


def build(lib, data):
    """W1's MLP in eval mode and one input row, in dualgraph or torch."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    model.load_state_dict({k: lib.tensor(v) for k, v in data["params"].items()})
    model.eval()
    return model, lib.tensor(data["x"])


def check(logits):
    return np.abs(np.asarray(logits)).sum()


def jax_jit(data):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def forward(p, x):
        for layer in range(3):
            x = x @ p[f"{2 * layer}.weight"].T + p[f"{2 * layer}.bias"]
            if layer < 2:
                x = jax.nn.relu(x)
        return x

    params = {k: jnp.asarray(v) for k, v in data["params"].items()}
    x = jnp.asarray(data["x"])
    return lambda: float(check(forward(params, x)))


IMPLS = {**torch_style_impls(build, check=check, inference=True), "jax_jit": jax_jit}
