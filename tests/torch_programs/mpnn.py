"""A message-passing neural network for graph regression over a batch of small molecules,
written the way PyTorch Geometric-free GNN code is: node features from ``F.one_hot`` of the
atom types, an ``edge_index`` of (source, target) rows, messages made per edge from
``x[src]``, ``x[dst]`` and an edge-type embedding kept in an ``nn.ParameterDict``,
aggregated with ``torch.zeros(...).scatter_add_(0, dst[:, None].expand(...), msg)`` and with
``index_add_`` (the degree for a mean), a GRU-style update through ``nn.GRUCell``, edge
attention weights from ``torch.einsum("ehd,hd->eh", ...)`` normalised per target node with
``scatter_reduce``-free ``exp`` / ``index_add_`` sums, a sum readout per graph by
``index_add`` over the ``batch`` vector, and per-layer ``nn.ModuleDict`` of
``{"msg", "upd"}``. Trained with Adam and ``StepLR`` on the molecules' target values."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_TYPES, N_BONDS = 5, 3


class MPLayer(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.fns = nn.ModuleDict({"msg": nn.Linear(2 * dim, dim), "upd": nn.GRUCell(dim, dim)})
        self.bond = nn.ParameterDict({f"b{i}": nn.Parameter(torch.zeros(dim))
                                      for i in range(N_BONDS)})
        self.att = nn.Parameter(torch.zeros(heads, dim // heads))

    def forward(self, x, edge_index, bond):
        src, dst = edge_index
        e = torch.stack([self.bond[f"b{i}"] for i in range(N_BONDS)])[bond]
        msg = F.relu(self.fns["msg"](torch.cat([x[src], x[dst]], dim=-1))) + e
        E, D = msg.shape
        score = torch.einsum("ehd,hd->eh", msg.view(E, self.heads, D // self.heads), self.att)
        score = (score - score.max()).exp()
        denom = torch.zeros(x.size(0), self.heads).index_add_(0, dst, score)
        alpha = score / denom[dst]
        weighted = (msg.view(E, self.heads, -1) * alpha[..., None]).reshape(E, D)
        agg = torch.zeros_like(x).scatter_add_(0, dst[:, None].expand(-1, D), weighted)
        deg = torch.zeros(x.size(0)).index_add_(0, dst, torch.ones(E))
        agg = agg + x * (deg == 0).float()[:, None]
        return self.fns["upd"](agg, x)


class MPNN(nn.Module):
    def __init__(self, dim=16, layers=2):
        super().__init__()
        self.embed = nn.Linear(N_TYPES, dim)
        self.layers = nn.ModuleList(MPLayer(dim) for _ in range(layers))
        self.readout = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, 1))

    def forward(self, atoms, edge_index, bond, batch, n_graphs):
        x = self.embed(F.one_hot(atoms, N_TYPES).float())
        for layer in self.layers:
            x = layer(x, edge_index, bond)
        pooled = torch.zeros(n_graphs, x.size(1)).index_add(0, batch, x)
        return self.readout(pooled).squeeze(-1)


def molecules(rng, n):
    """Random chains with a few rings closed: atom types, bonds both ways, targets."""
    out = []
    for _ in range(n):
        k = int(rng.integers(4, 7))
        atoms = rng.integers(0, N_TYPES, k)
        pairs = [(i, i + 1) for i in range(k - 1)] + ([(0, k - 1)] if rng.random() < 0.5 else [])
        bonds = rng.integers(0, N_BONDS, len(pairs))
        y = float(atoms.sum() * 0.1 + bonds.sum() * 0.2 - 0.3 * len(pairs))
        out.append((atoms, pairs, bonds, y))
    return out


def collate(mols):
    atoms, edges, bonds, batch, ys, offset = [], [], [], [], [], 0
    for g, (a, pairs, b, y) in enumerate(mols):
        atoms.append(a)
        for (i, j), bt in zip(pairs, b):
            edges += [(i + offset, j + offset), (j + offset, i + offset)]
            bonds += [bt, bt]
        batch += [g] * len(a)
        ys.append(y)
        offset += len(a)
    return (torch.tensor(np.concatenate(atoms)), torch.tensor(np.array(edges).T.copy()),
            torch.tensor(bonds), torch.tensor(batch), torch.tensor(ys, dtype=torch.float32))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({k: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
                           for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0):
    model = MPNN()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    rng = np.random.default_rng(seed + 1)
    batches = [collate(molecules(rng, 4)) for _ in range(2)]

    def train_step(atoms, edge_index, bond, batch, y):
        optimizer.zero_grad()
        pred = model(atoms, edge_index, bond, batch, 4)
        loss = F.mse_loss(pred, y)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for step in range(steps):
        losses.append(train_step(*batches[step % 2]).item())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        pred = model(*batches[0][:4], 4)
    return {"losses": losses, "pred": pred.tolist()}
