"""W7 mlp_infer_latency: single-sample inference through W1's MLP.

Batch 1, forward only, no gradient tracking: three tiny GEMVs, so the time is almost all
per-call overhead (dispatch, guards, argument handling). The weights are W1's. The value
compared across implementations is the sum of the 10 logits' absolute values, taken in
NumPy so that it adds no framework op to the timed call.

The onnxruntime peer runs the model as ``dg.onnx.export`` writes it (three Gemm nodes and
two Relu), with its intra-op threads capped like the other libraries' (``--threads``).
"""
import numpy as np

from .common import torch_style_impls
from .w1_mlp_train import make_data as w1_data

ID, NAME = "W7", "mlp_infer_latency"
# Steps of a fraction of a millisecond: 25 calls measure the warm-up (the first ~20 calls
# of any implementation are up to 2x slower while caches and Python's specialising
# interpreter settle), so every implementation runs more of them.
WARMUP, TIMED = 100, 200


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


def onnxruntime(data):
    import os
    import tempfile

    import onnxruntime as ort

    import dualgraph as dg
    model, x = build(dg, data)
    options = ort.SessionOptions()
    if os.environ.get("OMP_NUM_THREADS"):
        options.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "w7.onnx")
        dg.onnx.export(model, (x,), path)
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {"input": x.numpy()}
    return lambda: float(check(session.run(None, feed)[0]))


IMPLS = {**torch_style_impls(build, check=check, inference=True), "jax_jit": jax_jit,
         "onnxruntime": onnxruntime}
