"""A two-layer graph convolutional network (Kipf & Welling) for node classification and
its training loop, written the way the PyTorch GCN examples are: a random graph's edges
as an index tensor, the adjacency built with ``torch.sparse_coo_tensor`` plus self-loops,
the symmetric normalisation ``D^-1/2 (A + I) D^-1/2`` from ``sum(1).pow(-0.5)`` with
``isinf`` entries zeroed and ``torch.diag``, layers that multiply with ``torch.sparse.mm``
(or ``torch.spmm``), weights by ``nn.init.xavier_uniform_`` on ``nn.Parameter``s, boolean
train/validation masks indexing the outputs (``output[idx_train]``), ``F.log_softmax`` with
``F.nll_loss``, Adam with weight decay, and accuracy as ``pred.eq(labels).double().sum() /
len(labels)``. Dropout is 0 so that every framework computes the same losses."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.FloatTensor(in_features, out_features))
        self.bias = nn.Parameter(torch.FloatTensor(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.weight.size(1))
        nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.sparse.mm(adj, support)
        return output + self.bias if self.bias is not None else output


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout=0.0):
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=1)


def normalized_adjacency(edges, n):
    values = torch.ones(edges.shape[1])
    adj = torch.sparse_coo_tensor(edges, values, (n, n)).to_dense()
    adj = ((adj + adj.t()) > 0).float() + torch.eye(n)
    rowsum = adj.sum(1)
    r_inv_sqrt = rowsum.pow(-0.5)
    r_inv_sqrt[torch.isinf(r_inv_sqrt)] = 0.0
    d = torch.diag(r_inv_sqrt)
    return torch.spmm(torch.spmm(d, adj), d)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.uniform(-0.4, 0.4, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    return (correct.sum() / len(labels)).item()


def main(steps=10, compile=False, seed=0, n=30, nfeat=12, nclass=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    labels = torch.from_numpy(rng.integers(0, nclass, n))
    features = torch.tensor(rng.normal(0, 1, (n, nfeat)) + labels.numpy()[:, None] * 0.3,
                            dtype=torch.float32)
    edges = torch.from_numpy(rng.integers(0, n, (2, 3 * n)))
    adj = normalized_adjacency(edges, n)
    idx_train = torch.zeros(n, dtype=torch.bool)
    idx_train[: n // 2] = True
    idx_val = ~idx_train
    model = GCN(nfeat, 8, nclass)
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)

    def train_step(features, adj):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        return loss_train, output.detach()

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, val_losses, accs = [], [], []
    for epoch in range(steps):
        loss_train, output = train_step(features, adj)
        losses.append(loss_train.item())
        accs.append(accuracy(output[idx_train], labels[idx_train]))
        model.eval()
        with torch.no_grad():
            output = model(features, adj)
            val_losses.append(F.nll_loss(output[idx_val], labels[idx_val]).item())
            accs.append(accuracy(output[idx_val], labels[idx_val]))
    return {"losses": losses, "val_losses": val_losses, "accuracy": accs}
