"""A graph classifier written the way PyTorch Geometric-style code without the library
is: a mini-batch of graphs as one disjoint graph (``edge_index`` offset per graph and a
``batch`` vector), a ``scatter(src, index, dim_size, reduce)`` helper over
``Tensor.scatter_reduce(0, index.view(-1, 1).expand_as(src), src, reduce,
include_self=False)`` for "mean" and "amax" neighbourhood aggregation (GraphSAGE), an
attention layer whose edge softmax subtracts a per-node max of the detached scores (PyG's
``softmax``: ``scatter_reduce("amax")``, ``index_select``, ``exp``, a denominator by
``index_add_``), node-feature masking with ``index_fill`` (a masked-feature auxiliary
loss), and global mean and max pooling by ``scatter_reduce`` over ``batch``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def scatter(src, index, dim_size, reduce):
    index = index.view(-1, 1).expand_as(src)
    out = src.new_zeros((dim_size, src.size(1)))
    return out.scatter_reduce(0, index, src, reduce=reduce, include_self=False)


def softmax(src, index, num_nodes):
    src_max = src.new_zeros(num_nodes).scatter_reduce(0, index, src.detach(), "amax",
                                                      include_self=False)
    out = (src - src_max.index_select(0, index)).exp()
    out_sum = out.new_zeros(num_nodes).index_add_(0, index, out) + 1e-16
    return out / out_sum.index_select(0, index)


class SAGEConv(nn.Module):
    def __init__(self, in_channels, out_channels, aggr="mean"):
        super().__init__()
        self.aggr = aggr
        self.lin_l = nn.Linear(in_channels, out_channels)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x, edge_index):
        src, dst = edge_index
        out = scatter(x[src], dst, x.size(0), self.aggr)
        return self.lin_l(out) + self.lin_r(x)


class AttentionConv(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.lin = nn.Linear(channels, channels, bias=False)
        self.att = nn.Parameter(torch.empty(2 * channels))

    def forward(self, x, edge_index):
        src, dst = edge_index
        h = self.lin(x)
        alpha = F.leaky_relu(torch.cat([h[dst], h[src]], dim=-1) @ self.att, 0.2)
        alpha = softmax(alpha, dst, x.size(0))
        out = torch.zeros_like(h)
        out.index_add_(0, dst, h[src] * alpha.unsqueeze(-1))
        return out + h


class GraphNet(nn.Module):
    def __init__(self, in_channels=4, hidden=16, num_classes=2):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden, aggr="mean")
        self.conv2 = SAGEConv(hidden, hidden, aggr="amax")
        self.conv3 = AttentionConv(hidden)
        self.decoder = nn.Linear(hidden, in_channels)
        self.head = nn.Linear(2 * hidden, num_classes)

    def forward(self, x, edge_index, batch, num_graphs, masked_nodes):
        x_in = x.index_fill(0, masked_nodes, 0.0)
        h = F.relu(self.conv1(x_in, edge_index))
        h = F.relu(self.conv2(h, edge_index))
        h = self.conv3(h, edge_index)
        recon = self.decoder(h[masked_nodes])
        pooled = torch.cat([scatter(h, batch, num_graphs, "mean"),
                            scatter(h, batch, num_graphs, "amax")], dim=-1)
        return self.head(pooled), recon


def make_batch(rng, num_graphs=4, nodes=6, edges=10):
    xs, edge_index, batch, labels = [], [], [], []
    for g in range(num_graphs):
        label = int(rng.integers(0, 2))
        x = rng.normal(0, 1, (nodes, 4)).astype(np.float32)
        x[:, 0] += 1.5 * label
        src = rng.integers(0, nodes, edges)
        dst = (src + rng.integers(1, nodes, edges)) % nodes
        edge_index.append(np.stack([src, dst]) + g * nodes)
        xs.append(x)
        batch += [g] * nodes
        labels.append(label)
    masked = np.sort(rng.choice(num_graphs * nodes, 5, replace=False))
    return (torch.tensor(np.concatenate(xs)), torch.tensor(np.concatenate(edge_index, 1)),
            torch.tensor(batch), torch.tensor(labels), torch.tensor(masked))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0):
    model = GraphNet()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed + 1)

    def train_step(x, edge_index, batch, y, masked):
        optimizer.zero_grad()
        logits, recon = model(x, edge_index, batch, 4, masked)
        loss = F.cross_entropy(logits, y) + 0.5 * F.mse_loss(recon, x[masked])
        loss.backward()
        optimizer.step()
        return loss, logits.argmax(-1)

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, predictions = [], []
    for _ in range(steps):
        loss, pred = train_step(*make_batch(rng))
        losses.append(loss.item())
        predictions += pred.tolist()
    model.eval()
    x, edge_index, batch, _, masked = make_batch(np.random.default_rng(5))
    with torch.no_grad():
        logits, _ = model(x, edge_index, batch, 4, masked)
    return {"losses": losses, "predictions": predictions, "logits": logits.flatten().tolist()}
