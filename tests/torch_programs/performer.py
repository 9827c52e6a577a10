"""A Performer language model (Choromanski et al., FAVOR+) written the way lucidrains'
``performer-pytorch`` is, next to the ``elu(x) + 1`` linear attention of Katharopoulos et
al.: orthogonal random features from ``torch.linalg.qr`` of Gaussian blocks, scaled by the
norms of Gaussian rows, kept in ``register_buffer("projection_matrix", ...,
persistent=False)`` (so absent from ``state_dict``) and redrawn in place with ``copy_`` every
few steps; the softmax kernel ``ratio * (torch.exp(data_dash - diag_data - torch.amax(
data_dash, dim=-1, keepdim=True).detach()) + eps)`` with ``torch.einsum('...id,...jd->...ij',
...)``; non-causal attention through ``einsum('...nd,...ne->...de')`` and a three-operand
``einsum('...de,...nd,...n->...ne', context, q, D_inv)``; causal attention by
``cumsum`` of ``einsum('...nd,...ne->...nde')`` over positions; heads split by ``view`` /
``transpose`` and joined by ``reshape``; pre-LayerNorm blocks, ``nn.GELU``, weight-tied
logits ``x @ self.token_emb.weight.t()``, AdamW and ``clip_grad_norm_``, and a state-dict
round trip into a fresh model (the buffers it leaves out copied across by hand)."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def orthogonal_matrix_chunk(cols, rng):
    unstructured_block = torch.tensor(rng.normal(0, 1, (cols, cols)), dtype=torch.float32)
    q, r = torch.linalg.qr(unstructured_block)
    return q.t()


def gaussian_orthogonal_random_matrix(nb_rows, nb_columns, rng):
    nb_full_blocks = int(nb_rows / nb_columns)
    block_list = [orthogonal_matrix_chunk(nb_columns, rng) for _ in range(nb_full_blocks)]
    remaining_rows = nb_rows - nb_full_blocks * nb_columns
    if remaining_rows > 0:
        block_list.append(orthogonal_matrix_chunk(nb_columns, rng)[:remaining_rows])
    final_matrix = torch.cat(block_list)
    multiplier = torch.tensor(rng.normal(0, 1, (nb_rows, nb_columns)),
                              dtype=torch.float32).norm(dim=1)
    return torch.diag(multiplier) @ final_matrix


def softmax_kernel(data, *, projection_matrix, is_query, normalize_data=True, eps=1e-4):
    b, h, *_ = data.shape
    data_normalizer = (data.shape[-1] ** -0.25) if normalize_data else 1.
    ratio = (projection_matrix.shape[0] ** -0.5)
    projection = projection_matrix.expand(b, h, *projection_matrix.shape)
    data_dash = torch.einsum('...id,...jd->...ij', (data_normalizer * data), projection)
    diag_data = data ** 2
    diag_data = torch.sum(diag_data, dim=-1)
    diag_data = (diag_data / 2.0) * (data_normalizer ** 2)
    diag_data = diag_data.unsqueeze(dim=-1)
    if is_query:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(
            data_dash, dim=-1, keepdim=True).detach()) + eps)
    else:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(
            data_dash, dim=(-1, -2), keepdim=True).detach()) + eps)
    return data_dash.type_as(data)


def linear_attention(q, k, v):
    k_cumsum = k.sum(dim=-2)
    D_inv = 1. / torch.einsum('...nd,...d->...n', q, k_cumsum.type_as(q))
    context = torch.einsum('...nd,...ne->...de', k, v)
    out = torch.einsum('...de,...nd,...n->...ne', context, q, D_inv)
    return out


def causal_linear_attention(q, k, v, eps=1e-6):
    k_cumsum = k.cumsum(dim=-2)
    D_inv = 1. / torch.einsum('...nd,...nd->...n', q, k_cumsum.type_as(q) + eps)
    context = torch.einsum('...nd,...ne->...nde', k, v)
    context = context.cumsum(dim=-3)
    out = torch.einsum('...nde,...nd,...n->...ne', context, q, D_inv)
    return out


class FastAttention(nn.Module):
    def __init__(self, dim_heads, nb_features, causal, rng):
        super().__init__()
        self.dim_heads, self.nb_features, self.causal = dim_heads, nb_features, causal
        projection_matrix = gaussian_orthogonal_random_matrix(nb_features, dim_heads, rng)
        self.register_buffer("projection_matrix", projection_matrix, persistent=False)

    @torch.no_grad()
    def redraw_projection_matrix(self, rng):
        projections = gaussian_orthogonal_random_matrix(self.nb_features, self.dim_heads, rng)
        self.projection_matrix.copy_(projections)
        del projections

    def forward(self, q, k, v):
        q = softmax_kernel(q, is_query=True, projection_matrix=self.projection_matrix)
        k = softmax_kernel(k, is_query=False, projection_matrix=self.projection_matrix)
        attn_fn = linear_attention if not self.causal else causal_linear_attention
        return attn_fn(q, k, v)


class EluAttention(nn.Module):
    """Katharopoulos et al.'s feature map, ``elu(x) + 1``."""

    def forward(self, q, k, v):
        return causal_linear_attention(F.elu(q) + 1, F.elu(k) + 1, v)


class Attention(nn.Module):
    def __init__(self, dim, heads, causal, kind, rng):
        super().__init__()
        self.heads = heads
        dim_head = dim // heads
        self.fast_attention = (FastAttention(dim_head, 2 * dim_head + 3, causal, rng)
                               if kind == "favor" else EluAttention())
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.heads
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        q, k, v = map(lambda t: t.view(b, n, h, -1).transpose(1, 2), (q, k, v))
        out = self.fast_attention(q, k, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Block(nn.Module):
    def __init__(self, dim, heads, causal, kind, rng):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal, kind, rng)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class PerformerLM(nn.Module):
    def __init__(self, num_tokens, max_seq_len, dim, depth, heads, rng):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        kinds = [("favor", True), ("elu", True), ("favor", False)][:depth]
        self.layers = nn.ModuleList([Block(dim, heads, c, k, rng) for k, c in kinds])
        self.norm = nn.LayerNorm(dim)

    def fix_projection_matrices_(self, rng):
        for module in self.modules():
            if isinstance(module, FastAttention):
                module.redraw_projection_matrix(rng)

    def forward(self, x):
        b, n = x.shape
        x = self.token_emb(x) + self.pos_emb(torch.arange(n))
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return x @ self.token_emb.weight.t()


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.normal(0, 1 / math.sqrt(v.shape[-1]), tuple(v.shape))
                           .astype(np.float32)) if v.dim() > 1 else
        torch.ones_like(v) if "norm" in name and name.endswith("weight") else torch.zeros_like(v)
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=4, seq=12, vocab=20):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    proj_rng = np.random.default_rng(seed + 2)
    model = PerformerLM(vocab, seq, dim=16, depth=3, heads=2, rng=proj_rng)
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = [torch.tensor((rng.integers(0, 5, (batch, 1)) + np.arange(seq + 1) * rng.integers(
        1, 3, (batch, 1))) % vocab) for _ in range(steps)]

    def train_step(seqs):
        inp, target = seqs[:, :-1], seqs[:, 1:]
        logits = model(inp)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for i, seqs in enumerate(data):
        if i and i % 3 == 0:
            (model._orig_mod if hasattr(model, "_orig_mod") else model) \
                .fix_projection_matrices_(proj_rng)
        losses.append(train_step(seqs).item())
    base = model._orig_mod if hasattr(model, "_orig_mod") else model
    state = base.state_dict()
    fresh = PerformerLM(vocab, seq, dim=16, depth=3, heads=2, rng=np.random.default_rng(9))
    missing = fresh.load_state_dict(state, strict=True)
    for mine, theirs in zip(fresh.modules(), base.modules()):
        if isinstance(mine, FastAttention):
            mine.projection_matrix.copy_(theirs.projection_matrix)
    fresh.eval()
    with torch.no_grad():
        logits = fresh(data[0][:, :-1])
    return {"losses": losses, "keys": len(state), "missing": len(missing.missing_keys),
            "logits": logits[0, :3].flatten().tolist()}
