"""W3 gpt_train: one training step of a small decoder-only transformer (nanoGPT's shape).

Vocab 256, d_model 128, 4 heads, 2 layers, MLP 4x with tanh-GELU, pre-LayerNorm, causal
attention written out (scores, additive mask, softmax, weighted sum), sequence 64, batch
16, AdamW lr 3e-4 weight decay 0.01 (on every parameter). Many medium-sized ops of many
kinds: matmuls, LayerNorm, softmax, GELU, reshapes and transposes, embeddings.

dualgraph and torch share one model definition, written once against the torch-style API
(``lib`` is ``dualgraph`` or ``torch``); the initial weights come from NumPy
(``make_data``, nanoGPT's scheme: N(0, 0.02) weights, zero biases, unit LayerNorm) and are
loaded into every implementation.
"""
import numpy as np

from .common import jax_adam_step, torch_style_impls, training_step

ID, NAME = "W3", "gpt_train"
VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 256, 128, 4, 2, 64, 16
LR, WEIGHT_DECAY = 3e-4, 0.01
EPS = 1e-5       # LayerNorm's


def param_shapes() -> dict:
    """State-dict name -> shape, for the GPT class below."""
    shapes = {"wte.weight": (VOCAB, D), "wpe.weight": (SEQ, D)}
    for i in range(LAYERS):
        for name, (fan_in, fan_out) in [("attn", (D, 3 * D)), ("proj", (D, D)),
                                        ("fc", (D, 4 * D)), ("fc_proj", (4 * D, D))]:
            shapes[f"blocks.{i}.{name}.weight"] = (fan_out, fan_in)
            shapes[f"blocks.{i}.{name}.bias"] = (fan_out,)
        for ln in ("ln1", "ln2"):
            shapes[f"blocks.{i}.{ln}.weight"] = shapes[f"blocks.{i}.{ln}.bias"] = (D,)
    shapes["ln_f.weight"] = shapes["ln_f.bias"] = (D,)
    shapes["head.weight"] = (VOCAB, D)
    return shapes


def make_data():
    """Token ids, next-token targets and the initial weights, drawn once."""
    rng = np.random.default_rng(0)
    params = {}
    for name, shape in param_shapes().items():
        if "ln" in name:
            params[name] = np.ones(shape) if name.endswith("weight") else np.zeros(shape)
        elif name.endswith("bias"):
            params[name] = np.zeros(shape)
        else:
            params[name] = rng.normal(0.0, 0.02, shape)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ + 1))
    return {"params": {k: v.astype(np.float32) for k, v in params.items()},
            "x": tokens[:, :-1].astype(np.int64), "y": tokens[:, 1:].astype(np.int64)}


def causal_mask() -> np.ndarray:
    """Additive attention mask: 0 on and below the diagonal, -inf above."""
    return np.triu(np.full((SEQ, SEQ), -np.inf, dtype=np.float32), k=1)


def build(lib, data, checkpoint_blocks=False):
    """The GPT, AdamW and the training step, in dualgraph or torch; ``checkpoint_blocks``
    recomputes each block in the backward instead of keeping its activations
    (benchmarks/checkpoint_memory.py)."""
    nn, F = lib.nn, lib.nn.functional
    mask = lib.tensor(causal_mask())
    positions = lib.arange(SEQ)

    def attention(qkv):
        B, T, _ = qkv.shape
        q, k, v = [t.reshape(B, T, HEADS, D // HEADS).transpose(1, 2)
                   for t in qkv.split(D, dim=2)]
        scores = q @ k.transpose(-2, -1) * (1.0 / np.sqrt(D // HEADS)) + mask
        y = F.softmax(scores, dim=-1) @ v                       # B, heads, T, head dim
        return y.transpose(1, 2).reshape(B, T, D)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.attn, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.fc_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            x = x + self.proj(attention(self.attn(self.ln1(x))))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(positions)
            for block in self.blocks:
                if checkpoint_blocks:
                    x = lib.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            return self.head(self.ln_f(x))

    return training_step(
        lib, GPT(), data, lambda ps: lib.optim.AdamW(ps, lr=LR, weight_decay=WEIGHT_DECAY),
        loss=lambda logits, y: F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)))


def jax_jit(data):
    """The same GPT as a pure function of the parameter dict, trained with torch's AdamW."""
    import jax
    import jax.numpy as jnp
    mask = jnp.asarray(causal_mask())

    def layer_norm(x, p, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + EPS) * p[name + ".weight"] + p[name + ".bias"]

    def linear(x, p, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    def attention(qkv):
        B, T, _ = qkv.shape
        q, k, v = [t.reshape(B, T, HEADS, D // HEADS).transpose(0, 2, 1, 3)
                   for t in jnp.split(qkv, 3, axis=2)]
        scores = q @ k.transpose(0, 1, 3, 2) * (1.0 / np.sqrt(D // HEADS)) + mask
        y = jax.nn.softmax(scores, axis=-1) @ v
        return y.transpose(0, 2, 1, 3).reshape(B, T, D)

    def loss_fn(p, idx, targets):
        x = p["wte.weight"][idx] + p["wpe.weight"][jnp.arange(SEQ)]
        for i in range(LAYERS):
            b = f"blocks.{i}."
            x = x + linear(attention(linear(layer_norm(x, p, b + "ln1"), p, b + "attn")),
                           p, b + "proj")
            h = jax.nn.gelu(linear(layer_norm(x, p, b + "ln2"), p, b + "fc"), approximate=True)
            x = x + linear(h, p, b + "fc_proj")
        logits = layer_norm(x, p, "ln_f") @ p["head.weight"].T
        logp = jax.nn.log_softmax(logits.reshape(-1, VOCAB), axis=-1)
        return -jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1).mean()

    return jax_adam_step(loss_fn, data, LR, weight_decay=WEIGHT_DECAY)


IMPLS = {**torch_style_impls(build), "jax_jit": jax_jit}
