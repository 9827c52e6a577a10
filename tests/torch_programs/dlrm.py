"""DLRM as facebookresearch/dlrm's ``dlrm_s_pytorch.py`` writes it, scaled down: a bottom
MLP over dense features, one ``nn.EmbeddingBag(n, m, mode="sum")`` per sparse feature fed
multi-hot lookups as flat indices with ``offsets`` (and ``per_sample_weights`` on one
table, its weighted-sum mode), the dot interaction ``torch.bmm(T, torch.transpose(T, 1, 2))``
whose strict lower triangle is gathered with ``li, lj`` index tensors built from Python
lists (``Z[:, li, lj]``), ``torch.cat([x] + [Zflat], dim=1)``, a top MLP ending in a
sigmoid, ``torch.clamp(p, min=eps, max=1-eps)`` and ``nn.BCELoss(reduction="mean")``;
SGD for the MLPs and ``Adagrad`` for the embeddings (two optimisers, as its sparse
variant); accuracy by ``np.sum((Z.round() == T))``. Data: a synthetic click log whose
label depends on feature crosses."""
import numpy as np
import torch
import torch.nn as nn


class DLRM_Net(nn.Module):
    def create_mlp(self, ln, sigmoid_layer):
        layers = nn.ModuleList()
        for i in range(0, ln.size - 1):
            n, m = ln[i], ln[i + 1]
            LL = nn.Linear(int(n), int(m), bias=True)
            layers.append(LL)
            if i == sigmoid_layer:
                layers.append(nn.Sigmoid())
            else:
                layers.append(nn.ReLU())
        return torch.nn.Sequential(*layers)

    def create_emb(self, m, ln, weighted=()):
        emb_l = nn.ModuleList()
        for i in range(0, ln.size):
            n = ln[i]
            EE = nn.EmbeddingBag(n, m, mode="sum", sparse=False)
            emb_l.append(EE)
        return emb_l

    def __init__(self, m_spa, ln_emb, ln_bot, ln_top, sigmoid_top, weighted_table=1):
        super().__init__()
        self.emb_l = self.create_emb(m_spa, ln_emb)
        self.bot_l = self.create_mlp(ln_bot, -1)
        self.top_l = self.create_mlp(ln_top, sigmoid_top)
        self.weighted_table = weighted_table
        self.loss_threshold = 1e-7

    def apply_mlp(self, x, layers):
        return layers(x)

    def apply_emb(self, lS_o, lS_i, emb_l, per_sample_weights):
        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            sparse_offset_group_batch = lS_o[k]
            E = emb_l[k]
            psw = per_sample_weights if k == self.weighted_table else None
            V = E(sparse_index_group_batch, sparse_offset_group_batch, per_sample_weights=psw)
            ly.append(V)
        return ly

    def interact_features(self, x, ly):
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        offset = 0
        li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
        lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
        Zflat = Z[:, li, lj]
        R = torch.cat([x] + [Zflat], dim=1)
        return R

    def forward(self, dense_x, lS_o, lS_i, per_sample_weights):
        x = self.apply_mlp(dense_x, self.bot_l)
        ly = self.apply_emb(lS_o, lS_i, self.emb_l, per_sample_weights)
        z = self.interact_features(x, ly)
        p = self.apply_mlp(z, self.top_l)
        if 0.0 < self.loss_threshold and self.loss_threshold < 1.0:
            z = torch.clamp(p, min=self.loss_threshold, max=(1.0 - self.loss_threshold))
        else:
            z = p
        return z


def click_log(rng, n, ln_emb, dense=4, max_hot=3):
    X = rng.normal(size=(n, dense)).astype(np.float32)
    offsets, indices, first = [], [], []
    for size in ln_emb:
        counts = rng.integers(1, max_hot + 1, n)
        idx = rng.integers(0, size, counts.sum())
        offsets.append(torch.tensor(np.concatenate([[0], np.cumsum(counts)[:-1]])))
        indices.append(torch.tensor(idx))
        first.append(idx[np.concatenate([[0], np.cumsum(counts)[:-1]])])
    weights = torch.tensor(rng.uniform(0.5, 1.5, len(indices[1])).astype(np.float32))
    logit = X[:, 0] - X[:, 1] * X[:, 2] + np.where(first[0] % 2 == first[1] % 2, 1.0, -1.0)
    y = (logit + rng.normal(0, 0.5, n) > 0).astype(np.float32)
    return torch.tensor(X), offsets, indices, weights, torch.tensor(y).view(-1, 1)


def init_weights(model, rng):
    state = model.state_dict()
    for name, v in state.items():
        if name.startswith("emb_l"):
            n = v.shape[0]
            state[name] = torch.tensor(rng.uniform(-np.sqrt(1 / n), np.sqrt(1 / n), tuple(v.shape))
                                       .astype(np.float32))
        elif v.dim() == 2:
            m, n = v.shape
            state[name] = torch.tensor(rng.normal(0, np.sqrt(2 / (m + n)), (m, n))
                                       .astype(np.float32))
        else:
            state[name] = torch.tensor(rng.normal(0, np.sqrt(1 / v.shape[0]), tuple(v.shape))
                                       .astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=32):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    m_spa, ln_emb = 8, np.array([10, 7, 12])
    ln_bot = np.array([4, 16, m_spa])
    num_fea = ln_emb.size + 1
    ln_top = np.array([m_spa + num_fea * (num_fea - 1) // 2, 16, 1])
    dlrm = DLRM_Net(m_spa, ln_emb, ln_bot, ln_top, sigmoid_top=ln_top.size - 2)
    init_weights(dlrm, rng)
    loss_fn = torch.nn.BCELoss(reduction="mean")
    dense_params = [p for n, p in dlrm.named_parameters() if not n.startswith("emb_l")]
    optimizers = [torch.optim.SGD(dense_params, lr=0.1),
                  torch.optim.Adagrad(dlrm.emb_l.parameters(), lr=0.1)]
    data = [click_log(rng, batch, ln_emb) for _ in range(steps)]
    forward = dlrm

    def train_step(X, lS_o, lS_i, weights, T):
        Z = forward(X, lS_o, lS_i, weights)
        E = loss_fn(Z, T)
        for opt in optimizers:
            opt.zero_grad()
        E.backward()
        for opt in optimizers:
            opt.step()
        return E, Z

    if compile == "model":
        forward = torch.compile(dlrm)
    elif compile:
        train_step = torch.compile(train_step)
    losses, accs = [], []
    for X, lS_o, lS_i, weights, T in data:
        E, Z = train_step(X, lS_o, lS_i, weights, T)
        L = E.detach().cpu().numpy()
        S = Z.detach().cpu().numpy()
        A = np.sum((np.round(S, 0) == T.numpy()).astype(np.uint8))
        losses.append(float(L))
        accs.append(int(A))
    X, lS_o, lS_i, weights, T = click_log(rng, 64, ln_emb)
    with torch.no_grad():
        Z = dlrm(X, lS_o, lS_i, weights)
    return {"losses": losses, "correct": accs, "test_probs": Z[:8].flatten().tolist(),
            "emb0": dlrm.emb_l[0].weight[:2].detach().flatten().tolist()}
