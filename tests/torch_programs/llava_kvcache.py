"""A small vision-language model written the way LLaVA-style code and gpt-fast are: image
patches cut with ``unfold``, projected by a ``Linear``-``GELU``-``Linear`` projector and
put in place of the ``<image>`` placeholder tokens with ``inputs_embeds.masked_scatter(
(input_ids == image_token_id).unsqueeze(-1).expand_as(inputs_embeds), image_features)``;
a decoder whose attention writes into a static KV cache of preallocated buffers with
``k_cache.index_copy_(2, input_pos, k)`` (gpt-fast's ``KVCache.update``), reads a causal
mask buffer at ``input_pos``, and calls ``F.scaled_dot_product_attention`` with that
boolean mask; ``setup_caches`` registers the cache buffers once, so decoding one token at
a time keeps every shape fixed; training masks the image positions out of the labels with
``torch.where`` and ``-100``; greedy decoding with ``torch.argmax`` under
``torch.inference_mode()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

IMAGE_TOKEN, VOCAB = 1, 19


class KVCache(nn.Module):
    def __init__(self, batch, heads, max_seq, head_dim):
        super().__init__()
        shape = (batch, heads, max_seq, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def update(self, input_pos, k_val, v_val):
        k_out = self.k_cache.index_copy_(2, input_pos, k_val)
        v_out = self.v_cache.index_copy_(2, input_pos, v_val)
        return k_out, v_out


class Attention(nn.Module):
    def __init__(self, dim, n_head):
        super().__init__()
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.n_head, self.head_dim = n_head, dim // n_head
        self.kv_cache = None

    def forward(self, x, mask, input_pos=None):
        bsz, seqlen, dim = x.shape
        q, k, v = self.wqkv(x).split([dim, dim, dim], dim=-1)
        q, k, v = (t.view(bsz, seqlen, self.n_head, self.head_dim).transpose(1, 2)
                   for t in (q, k, v))
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, dim)
        return self.wo(y)


class Block(nn.Module):
    def __init__(self, dim, n_head):
        super().__init__()
        self.attention = Attention(dim, n_head)
        self.feed_forward = nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(),
                                          nn.Linear(2 * dim, dim))
        self.attention_norm, self.ffn_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x, mask, input_pos=None):
        h = x + self.attention(self.attention_norm(x), mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class VisionLanguageModel(nn.Module):
    def __init__(self, dim=16, n_head=2, n_layer=2, patch=4, channels=3, max_seq_length=24):
        super().__init__()
        self.patch = patch
        self.patch_embed = nn.Linear(channels * patch * patch, dim)
        self.mm_projector = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.tok_embeddings = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList(Block(dim, n_head) for _ in range(n_layer))
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, VOCAB, bias=False)
        self.max_seq_length = max_seq_length
        self.register_buffer("causal_mask", torch.tril(torch.ones(
            max_seq_length, max_seq_length, dtype=torch.bool)), persistent=False)

    def setup_caches(self, max_batch_size):
        for b in self.layers:
            b.attention.kv_cache = KVCache(max_batch_size, b.attention.n_head,
                                           self.max_seq_length, b.attention.head_dim)

    def encode_images(self, pixel_values):
        p = self.patch
        patches = pixel_values.unfold(2, p, p).unfold(3, p, p)    # B, C, h, w, p, p
        patches = patches.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)
        return self.mm_projector(self.patch_embed(patches))

    def forward(self, input_ids, pixel_values=None, input_pos=None):
        inputs_embeds = self.tok_embeddings(input_ids)
        if pixel_values is not None:
            image_features = self.encode_images(pixel_values).reshape(-1, inputs_embeds.shape[-1])
            special_image_mask = (input_ids == IMAGE_TOKEN).unsqueeze(-1)
            special_image_mask = special_image_mask.expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(special_image_mask,
                                                         image_features.to(inputs_embeds.dtype))
        seqlen = input_ids.shape[1]
        if input_pos is None:   # training: no cache, causal over the sequence
            mask = self.causal_mask[None, None, :seqlen, :seqlen]
        else:
            mask = self.causal_mask[None, None, input_pos]
        x = inputs_embeds
        for layer in self.layers:
            x = layer(x, mask, input_pos)
        return self.output(self.norm(x))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                         k.endswith("weight") else rng.normal(0, 0.25, tuple(v.shape)))
                        .astype(np.float32))
        for k, v in model.state_dict().items()})


def batch(rng, size=3):
    """An 8x8 image (4 patches) whose mean brightness picks the caption's first word; the
    caption counts on from it. Tokens: 4 image placeholders, then 6 words."""
    pixels = rng.normal(0, 1, (size, 3, 8, 8)).astype(np.float32)
    level = rng.integers(0, 4, size)
    pixels += level[:, None, None, None].astype(np.float32)
    words = (2 + 3 * level[:, None] + np.arange(6)) % (VOCAB - 2) + 2
    ids = np.concatenate([np.full((size, 4), IMAGE_TOKEN), words], 1)
    return torch.tensor(pixels), torch.tensor(ids)


@torch.inference_mode()
def greedy(model, pixels, ids, new_tokens):
    model.setup_caches(max_batch_size=ids.shape[0])
    T = ids.shape[1]
    logits = model(ids, pixels, input_pos=torch.arange(0, T))
    tokens = [torch.argmax(logits[:, -1], dim=-1, keepdim=True)]
    for i in range(new_tokens - 1):
        logits = model(tokens[-1], input_pos=torch.tensor([T + i]))
        tokens.append(torch.argmax(logits[:, -1], dim=-1, keepdim=True))
    return torch.cat(tokens, dim=1)


def main(steps=10, compile=False, seed=0):
    model = VisionLanguageModel()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    rng = np.random.default_rng(seed + 1)

    def train_step(pixels, ids):
        labels = torch.where(ids == IMAGE_TOKEN, torch.full_like(ids, -100), ids)
        logits = model(ids[:, :-1], pixels)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for _ in range(steps):
        losses.append(train_step(*batch(rng)).item())
    model.eval()
    pixels, ids = batch(np.random.default_rng(99), size=2)
    out = greedy(model, pixels, ids[:, :6], 5)
    caches = [b.attention.kv_cache.k_cache[:, :, :10].sum().item() for b in model.layers]
    return {"losses": losses, "tokens": out.flatten().tolist(), "caches": caches}
