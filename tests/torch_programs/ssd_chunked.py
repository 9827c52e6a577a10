"""A Mamba-2-style state-space duality (SSD) layer with the chunked scan written as the
minimal reference implementations write it: ``einops``-free ``reshape`` into chunks, the
log-decays ``A * dt`` summed within each chunk by ``torch.cumsum``, ``segsum`` built from
``x[..., None].repeat(..., T)`` masked by ``torch.tril(torch.ones(..., dtype=bool),
diagonal=-1)`` with ``masked_fill(~mask, 0)``, its cumsum masked again with ``-torch.inf``
(``exp`` of it is the decay matrix, zeros above the diagonal), four ``torch.einsum``
steps (diagonal blocks, chunk states, the inter-chunk recurrence through a padded
``F.pad`` of the chunk sums, state-to-output), a loop over chunks for streaming inference
carrying the state, gated RMSNorm, a depthwise causal conv, ``dt`` through
``F.softplus(dt + dt_bias)`` clamped, and AdamW with a cosine schedule."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def segsum(x):
    """Stable segment sums: out[..., i, j] = sum(x[..., j+1:i+1]) for j <= i, else -inf."""
    T = x.size(-1)
    x = x[..., None].repeat(*([1] * x.dim()), T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~mask, 0)
    x_segsum = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=0)
    x_segsum = x_segsum.masked_fill(~mask, -torch.inf)
    return x_segsum


def ssd(X, A, B, C, chunk, initial_states=None):
    """X: (b, l, h, p), A: (b, l, h), B and C: (b, l, h, n); returns Y and the final state."""
    b, l, h, p = X.shape
    n = B.shape[-1]
    c = l // chunk
    X, A, B, C = [t.reshape(b, c, chunk, *t.shape[2:]) for t in (X, A, B, C)]
    A = A.permute(0, 3, 1, 2)                      # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    L = torch.exp(segsum(A))
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, L, X)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    else:
        initial_states = initial_states.unsqueeze(1)
    states = torch.cat([initial_states, states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    state_decay_out = torch.exp(A_cumsum)
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, state_decay_out)
    Y = (Y_diag + Y_off).reshape(b, c * chunk, h, p)
    return Y, final_state


class GatedRMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x, z):
        x = x * F.silu(z)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba2Block(nn.Module):
    def __init__(self, d_model=8, headdim=4, d_state=3, expand=2, d_conv=3, chunk=4):
        super().__init__()
        self.d_inner = expand * d_model
        self.nheads = self.d_inner // headdim
        self.headdim, self.d_state, self.chunk = headdim, d_state, chunk
        d_in_proj = 2 * self.d_inner + 2 * d_state + self.nheads
        self.in_proj = nn.Linear(d_model, d_in_proj, bias=False)
        conv_dim = self.d_inner + 2 * d_state
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, d_conv, groups=conv_dim, padding=d_conv - 1)
        self.dt_bias = nn.Parameter(torch.zeros(self.nheads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, self.nheads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = GatedRMSNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, u, state=None):
        batch, seqlen, _ = u.shape
        zxbcdt = self.in_proj(u)
        z, xBC, dt = torch.split(
            zxbcdt, [self.d_inner, self.d_inner + 2 * self.d_state, self.nheads], dim=-1)
        dt = F.softplus(dt + self.dt_bias).clamp(min=1e-3, max=2.0)
        xBC = F.silu(self.conv1d(xBC.transpose(1, 2))[..., :seqlen].transpose(1, 2))
        x, B, C = torch.split(xBC, [self.d_inner, self.d_state, self.d_state], dim=-1)
        A = -torch.exp(self.A_log)
        x = x.reshape(batch, seqlen, self.nheads, self.headdim)
        B = B.unsqueeze(2).expand(-1, -1, self.nheads, -1)
        C = C.unsqueeze(2).expand(-1, -1, self.nheads, -1)
        y, final = ssd(x * dt.unsqueeze(-1), A * dt, B, C, self.chunk, state)
        y = y + x * self.D[:, None]
        y = self.norm(y.reshape(batch, seqlen, -1), z)
        return self.out_proj(y), final


class LM(nn.Module):
    def __init__(self, vocab=11, d_model=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.block = Mamba2Block(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx, state=None):
        h = self.embed(idx)
        y, final = self.block(h, state)
        return self.head(h + y), final


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = LM()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name not in ("block.A_log", "block.D", "block.norm.weight"):
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    net = torch.compile(model) if compile == "model" else model

    def train_step(idx):
        logits, _ = net(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        start = rng.integers(0, 11, (3, 1))
        idx = torch.from_numpy((start + np.arange(13)[None] * 2) % 11)
        log.append(train_step(idx).item())
        scheduler.step()
    # the chunked scan in one pass against the same sequence fed chunk by chunk with the
    # carried state
    idx = torch.from_numpy(rng.integers(0, 11, (2, 12)))
    with torch.no_grad():
        whole, _ = net(idx)
        state, parts = None, []
        for t in range(0, 12, 4):
            out, state = net(idx[:, t:t + 4], state)
            parts.append(out)
        streamed = torch.cat(parts, dim=1)
    return {"log": log, "whole": whole[0, -1].tolist(), "streamed": streamed[1, 5].tolist(),
            "state": state.flatten()[:8].tolist()}
