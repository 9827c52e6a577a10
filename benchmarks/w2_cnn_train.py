"""W2 cnn_train: one training step of LeNet-5 on 1x28x28 images.

conv(1->6, 5x5, pad 2) relu maxpool2, conv(6->16, 5x5) relu maxpool2, fc 400-120-84-10 with
relu; batch 64, cross-entropy, Adam lr 1e-3. Small convolutions on a small batch: the cost
is im2col, a few thin GEMMs and pooling, so kernel quality and per-op overhead both show.

dualgraph and torch share one model definition, written once against the torch-style API
(``lib`` is ``dualgraph`` or ``torch``); the initial weights come from NumPy
(``make_data``) and are loaded into every implementation.
"""
import numpy as np

from .common import jax_adam_step, torch_style_impls, training_step

ID, NAME = "W2", "cnn_train"
# Steps of 6-15 ms: every implementation warms up for ~0.3 s or more (W1's comment).
WARMUP, TIMED = 50, 50
BATCH = 64
LR = 1e-3
# (state-dict name, weight shape): the Sequential's indices, as torch numbers them
LAYERS = [("0", (6, 1, 5, 5)), ("3", (16, 6, 5, 5)), ("7", (120, 400)), ("9", (84, 120)),
          ("11", (10, 84))]


def make_data():
    """Images, labels and the initial weights (torch's default init bounds,
    1/sqrt(fan_in) for weights and biases), drawn once."""
    rng = np.random.default_rng(0)
    params = {}
    for name, shape in LAYERS:
        bound = 1 / np.sqrt(np.prod(shape[1:]))
        params[f"{name}.weight"] = rng.uniform(-bound, bound, shape).astype(np.float32)
        params[f"{name}.bias"] = rng.uniform(-bound, bound, shape[0]).astype(np.float32)
    return {"params": params,
            "x": rng.standard_normal((BATCH, 1, 28, 28), dtype=np.float32),
            "y": rng.integers(0, 10, BATCH).astype(np.int64)}


def build(lib, data):
    """LeNet-5, Adam and the training step, in dualgraph or torch."""
    nn = lib.nn
    model = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),      # 6x14x14
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),                # 16x5x5
        nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    return training_step(lib, model, data, lambda ps: lib.optim.Adam(ps, lr=LR))


def jax_jit(data):
    """LeNet as pure functions, NCHW and OIHW like torch, trained with torch's Adam."""
    import jax
    import jax.numpy as jnp

    def conv(x, w, b, pad):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), [(pad, pad), (pad, pad)],
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def loss_fn(p, x, y):
        h = pool(jax.nn.relu(conv(x, p["0.weight"], p["0.bias"], 2)))
        h = pool(jax.nn.relu(conv(h, p["3.weight"], p["3.bias"], 0)))
        h = h.reshape(h.shape[0], -1)
        for name in ("7", "9", "11"):
            h = h @ p[f"{name}.weight"].T + p[f"{name}.bias"]
            if name != "11":
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h, axis=-1)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    return jax_adam_step(loss_fn, data, LR)


IMPLS = {**torch_style_impls(build), "jax_jit": jax_jit}
