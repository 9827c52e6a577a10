"""A key/value cache kept by forward hooks, the way OpenAI's Whisper decodes: the
attention's ``key`` and ``value`` ``nn.Linear`` layers get forward hooks that store their
output in a dict keyed by the module (the whole output at the first call or for the
cross-attention, else ``torch.cat([cache[module], output], dim=1).detach()``) and return
the cached tensor in place of the output; the attention reads ``kv_cache[self.key]``
instead of projecting the audio features again once they are cached; the decoder finds
its position offset from the cache's length (``next(iter(kv_cache.values())).shape[1]``)
and slices a causal-mask buffer. The model is trained with teacher forcing, then decodes
greedily twice under ``torch.no_grad()``: feeding only the newest token with the hooks
installed (``decoder.apply(install_hooks)``, handles removed after), and recomputing the
whole prefix without a cache; both must give the same tokens and last logits."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, xa=None, mask=None, kv_cache=None):
        q = self.query(x)
        if kv_cache is None or xa is None or self.key not in kv_cache:
            k = self.key(x if xa is None else xa)
            v = self.value(x if xa is None else xa)
        else:
            k, v = kv_cache[self.key], kv_cache[self.value]
        b, n, d = q.shape
        scale = (d // self.heads) ** -0.25
        q = q.view(b, n, self.heads, -1).permute(0, 2, 1, 3) * scale
        k = k.view(b, k.shape[1], self.heads, -1).permute(0, 2, 3, 1) * scale
        v = v.view(b, v.shape[1], self.heads, -1).permute(0, 2, 1, 3)
        qk = q @ k
        if mask is not None:
            qk = qk + mask[:n, :n]
        w = F.softmax(qk.float(), dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = MultiHeadAttention(dim, heads)
        self.attn_ln = nn.LayerNorm(dim)
        self.cross_attn = MultiHeadAttention(dim, heads)
        self.cross_ln = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.mlp_ln = nn.LayerNorm(dim)

    def forward(self, x, xa, mask, kv_cache=None):
        x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)
        x = x + self.cross_attn(self.cross_ln(x), xa, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))


class Decoder(nn.Module):
    def __init__(self, vocab=11, ctx=12, dim=16, heads=2, layers=2):
        super().__init__()
        self.ctx = ctx
        self.token_embedding = nn.Embedding(vocab, dim)
        self.positional_embedding = nn.Parameter(torch.empty(ctx, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.empty(ctx, ctx).fill_(-np.inf).triu_(1),
                             persistent=False)

    def forward(self, x, xa, kv_cache=None):
        offset = next(iter(kv_cache.values())).shape[1] if kv_cache else 0
        x = self.token_embedding(x) + self.positional_embedding[offset:offset + x.shape[-1]]
        for block in self.blocks:
            x = block(x, xa, self.mask, kv_cache=kv_cache)
        x = self.ln(x)
        return x @ self.token_embedding.weight.t()


def install_kv_cache_hooks(decoder):
    cache, hooks = {}, []

    def save_to_cache(module, _, output):
        if module not in cache or output.shape[1] > decoder.ctx:
            cache[module] = output
        else:
            cache[module] = torch.cat([cache[module], output], dim=1).detach()
        return cache[module]

    def install_hooks(layer):
        if isinstance(layer, MultiHeadAttention):
            hooks.append(layer.key.register_forward_hook(save_to_cache))
            hooks.append(layer.value.register_forward_hook(save_to_cache))

    decoder.apply(install_hooks)
    return cache, hooks


def greedy(net, decoder, audio, start, length, use_cache):
    tokens = start
    cache, hooks = install_kv_cache_hooks(decoder) if use_cache else (None, [])
    with torch.no_grad():
        for _ in range(length):
            inputs = tokens[:, -1:] if cache else tokens
            logits = net(inputs, audio, kv_cache=cache)
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    for hook in hooks:
        hook.remove()
    return tokens, logits[:, -1]


def batch(rng, n=6, length=9):
    audio = rng.normal(size=(n, 13, 16)).astype(np.float32)
    first = rng.integers(1, 11, n)
    tokens = (first[:, None] + np.arange(length)[None]) % 11
    return torch.from_numpy(tokens), torch.from_numpy(audio)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    decoder = Decoder()
    decoder.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                                 .astype(np.float32))
                             for k, v in decoder.state_dict().items()})
    optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-2)
    net = torch.compile(decoder) if compile == "model" else decoder

    def step(tokens, audio):
        optimizer.zero_grad()
        logits = net(tokens[:, :-1], audio)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses = [step(*batch(rng)).item() for _ in range(steps)]
    tokens, audio = batch(rng, n=3)
    cached, cached_logits = greedy(net, decoder, audio, tokens[:, :2], 5, use_cache=True)
    full, full_logits = greedy(net, decoder, audio, tokens[:, :2], 5, use_cache=False)
    return {"losses": losses, "cached": cached.tolist(), "full": full.tolist(),
            "cached_logits": cached_logits.flatten().tolist(),
            "full_logits": full_logits.flatten().tolist(),
            "hooks_left": [sum(len(m._forward_hooks) for m in decoder.modules())]}
