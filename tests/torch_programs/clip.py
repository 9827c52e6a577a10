"""A CLIP-style two-tower contrastive model, written the way CLIP's and open_clip's model
code is: an image tower (a conv stem, ``flatten(2).permute(0, 2, 1)`` patches, a class
embedding ``torch.cat([self.class_embedding + torch.zeros(...), x], dim=1)``), a text
tower over ``nn.MultiheadAttention`` in the sequence-first layout (``x.permute(1, 0, 2)``)
with a causal mask built as ``torch.empty(n, n).fill_(float("-inf")).triu_(1)`` in a
non-persistent buffer, ``QuickGELU`` (``x * torch.sigmoid(1.702 * x)``), a ``LayerNorm``
subclass that computes in float32 and casts back with ``.type(orig_type)``, the text
features read at the end-of-text token ``x[torch.arange(x.shape[0]), text.argmax(dim=-1)]``,
projections as bare ``nn.Parameter`` matrices used with ``@``, features normalised with
``x / x.norm(dim=-1, keepdim=True)``, a learned temperature ``logit_scale =
nn.Parameter(torch.ones([]) * np.log(1 / 0.07))`` used as ``logit_scale.exp()`` and
clamped in place after each step under ``torch.no_grad()``, the symmetric cross-entropy
over ``torch.arange(n)`` labels, parameter groups without weight decay for gains, biases
and the temperature, and zero-shot classification ``(100.0 * image_features @
text_features.T).softmax(dim=-1)`` with ``topk``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor):
        orig_type = x.dtype
        ret = super().forward(x.type(torch.float32))
        return ret.type(orig_type)


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head, attn_mask=None):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1 = LayerNorm(d_model)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(d_model, d_model * 4)), ("gelu", QuickGELU()),
            ("c_proj", nn.Linear(d_model * 4, d_model))]))
        self.ln_2 = LayerNorm(d_model)
        self.attn_mask = attn_mask

    def attention(self, x):
        mask = self.attn_mask.to(dtype=x.dtype) if self.attn_mask is not None else None
        return self.attn(x, x, x, need_weights=False, attn_mask=mask)[0]

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width, layers, heads, attn_mask=None):
        super().__init__()
        self.resblocks = nn.Sequential(*[ResidualAttentionBlock(width, heads, attn_mask)
                                         for _ in range(layers)])

    def forward(self, x):
        return self.resblocks(x)


class VisionTower(nn.Module):
    def __init__(self, resolution, patch, width, layers, heads, output_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(
            scale * torch.randn((resolution // patch) ** 2 + 1, width))
        self.ln_pre = LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        x = torch.cat([self.class_embedding.to(x.dtype) + torch.zeros(
            x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device), x], dim=1)
        x = self.ln_pre(x + self.positional_embedding.to(x.dtype))
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        return self.ln_post(x[:, 0, :]) @ self.proj


class CLIP(nn.Module):
    def __init__(self, embed_dim=16, resolution=8, patch=4, vocab=30, context=6, width=16):
        super().__init__()
        self.context_length = context
        self.visual = VisionTower(resolution, patch, width, 1, 2, embed_dim)
        self.register_buffer("attn_mask", self.build_attention_mask(), persistent=False)
        self.transformer = Transformer(width, 1, 2, attn_mask=self.attn_mask)
        self.token_embedding = nn.Embedding(vocab, width)
        self.positional_embedding = nn.Parameter(torch.empty(context, width))
        self.ln_final = LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, embed_dim))
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        nn.init.normal_(self.text_projection, std=width ** -0.5)

    def build_attention_mask(self):
        mask = torch.empty(self.context_length, self.context_length)
        mask.fill_(float("-inf"))
        mask.triu_(1)
        return mask

    @property
    def dtype(self):
        return self.visual.conv1.weight.dtype

    def encode_image(self, image):
        return self.visual(image.type(self.dtype))

    def encode_text(self, text):
        x = self.token_embedding(text).type(self.dtype)
        x = x + self.positional_embedding.type(self.dtype)
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        x = self.ln_final(x).type(self.dtype)
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection

    def forward(self, image, text):
        image_features = self.encode_image(image)
        text_features = self.encode_text(text)
        image_features = image_features / image_features.norm(dim=1, keepdim=True)
        text_features = text_features / text_features.norm(dim=1, keepdim=True)
        logit_scale = self.logit_scale.exp()
        logits_per_image = logit_scale * image_features @ text_features.t()
        return logits_per_image, logits_per_image.t()


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor(v.numpy() if k == "logit_scale" else (
            1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "ln" in k and k.endswith("weight")
            else rng.normal(0, 0.2, tuple(v.shape))).astype(np.float32))
        for k, v in model.state_dict().items()})


def make_batch(rng, batch, vocab=30, context=6):
    """Images whose mean colour says the class; captions whose class word says it too, the
    end-of-text token (the largest id) after a variable number of words."""
    classes = rng.integers(0, 4, batch)
    images = rng.normal(0, 0.5, (batch, 3, 8, 8)) + (classes[:, None, None, None] - 1.5)
    text = np.zeros((batch, context), dtype=np.int64)
    for b, c in enumerate(classes):
        n = rng.integers(1, context - 1)
        text[b, 0], text[b, 1:n] = 1 + c, rng.integers(5, vocab - 1, n - 1)
        text[b, n] = vocab - 1
    return torch.tensor(images.astype(np.float32)), torch.tensor(text)


def main(steps=10, compile=False, seed=0, batch=8):
    model = CLIP()
    init_weights(model, seed)
    exclude = lambda n, p: p.ndim < 2 or "ln" in n or "bias" in n or "logit_scale" in n  # noqa: E731
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW([
        {"params": [p for n, p in named if exclude(n, p) and p.requires_grad],
         "weight_decay": 0.0},
        {"params": [p for n, p in named if not exclude(n, p) and p.requires_grad],
         "weight_decay": 0.2}], lr=3e-3, betas=(0.9, 0.98), eps=1e-6)
    rng = np.random.default_rng(seed + 1)

    def train_step(images, texts):
        optimizer.zero_grad()
        logits_per_image, logits_per_text = model(images, texts)
        labels = torch.arange(images.shape[0], dtype=torch.long)
        total_loss = (F.cross_entropy(logits_per_image, labels)
                      + F.cross_entropy(logits_per_text, labels)) / 2
        total_loss.backward()
        optimizer.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        return total_loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = [train_step(*make_batch(rng, batch)).item() for _ in range(steps)]

    images, _ = make_batch(rng, 4)
    prompts = torch.tensor([[1 + c, 29, 0, 0, 0, 0] for c in range(4)])
    with torch.no_grad():
        image_features = model.encode_image(images)
        text_features = model.encode_text(prompts)
        image_features /= image_features.norm(dim=-1, keepdim=True)
        text_features /= text_features.norm(dim=-1, keepdim=True)
        similarity = (100.0 * image_features @ text_features.T).softmax(dim=-1)
        values, indices = similarity[0].topk(2)
    return {"losses": losses, "scale": [model.logit_scale.item()],
            "zero_shot": values.tolist(), "top": indices.tolist()}
