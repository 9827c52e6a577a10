"""W10 encoder_infer: a BERT-style encoder's inference on int64 token ids.

Token and learned position embeddings, then 4 post-LayerNorm layers (multi-head
self-attention with 4 heads over d_model 256, residual, LayerNorm; a 1024-wide FFN with
exact GELU, ``nn.GELU()``'s default, residual, LayerNorm), sequence 128, vocabulary 8192;
written once against the torch-style API. Batch 1 (``W10``) and 16 (``W10/16``); forward
only. The compared value is the mean absolute output; onnxruntime runs the model as
``torch.onnx.export`` writes it.
"""
import math

import numpy as np

from .common import onnxruntime_from_torch, random_state, torch_style_impls

ID, NAME = "W10", "encoder_infer"
WARMUP, TIMED = 3, 10
BATCH = 1
VOCAB, SEQ, D_MODEL, HEADS, FFN, LAYERS = 8192, 128, 256, 4, 1024, 4


def encoder(lib):
    nn = lib.nn

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.out = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (y.view(b, t, HEADS, d // HEADS).transpose(1, 2) for y in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // HEADS))
            y = att.softmax(dim=-1) @ v
            return self.out(y.transpose(1, 2).reshape(b, t, d))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = SelfAttention()
            self.ln1 = nn.LayerNorm(D_MODEL)
            self.ffn = nn.Sequential(nn.Linear(D_MODEL, FFN), nn.GELU(), nn.Linear(FFN, D_MODEL))
            self.ln2 = nn.LayerNorm(D_MODEL)

        def forward(self, x):
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.ffn(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, D_MODEL)
            self.positions = nn.Embedding(SEQ, D_MODEL)
            self.ln = nn.LayerNorm(D_MODEL)
            self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])

        def forward(self, ids):
            positions = lib.arange(ids.shape[1])
            x = self.ln(self.tokens(ids) + self.positions(positions))
            for layer in self.layers:
                x = layer(x)
            return x
    return Encoder()


def make_data(batch=BATCH):
    import dualgraph as dg
    rng = np.random.default_rng(10)
    return {"params": random_state(encoder(dg), 10),
            "ids": rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int64)}


def build(lib, data):
    model = encoder(lib)
    model.load_state_dict({k: lib.tensor(v) for k, v in data["params"].items()})
    model.eval()
    return model, lib.tensor(data["ids"])


def check(out):
    return np.abs(np.asarray(out)).mean()


IMPLS = {**torch_style_impls(build, check=check, inference=True),
         "onnxruntime": onnxruntime_from_torch(build, check, NAME)}
