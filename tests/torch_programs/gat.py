"""A graph attention network (Velickovic et al.) for node classification, written the way
the pyGAT reference code is: a ``GraphAttentionLayer`` with ``nn.Parameter(torch.empty(
size=...))`` weights initialised by ``nn.init.xavier_uniform_(..., gain=1.414)``, the
attention logits ``Wh1 + Wh2.T`` from ``torch.matmul(Wh, self.a[:out, :])``, a
``nn.LeakyReLU(alpha)``, masking with ``torch.where(adj > 0, e, -9e15 * torch.ones_like(e))``,
``F.softmax(attention, dim=1)``, ``F.elu``, several heads joined by ``torch.cat([att(x, adj)
for att in self.attentions], dim=1)`` and registered with ``self.add_module('attention_{}'
.format(i), ...)``, ``F.log_softmax`` and ``F.nll_loss`` over index tensors of train and
validation nodes, Adam with weight decay, and accuracy by ``output.max(1)[1].type_as(
labels)``. Dropout is 0 so that every framework computes the same losses."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super().__init__()
        self.dropout = dropout
        self.in_features = in_features
        self.out_features = out_features
        self.alpha = alpha
        self.concat = concat
        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2 * out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)
        self.leakyrelu = nn.LeakyReLU(self.alpha)

    def forward(self, h, adj):
        Wh = torch.mm(h, self.W)
        e = self._prepare_attentional_mechanism_input(Wh)
        zero_vec = -9e15 * torch.ones_like(e)
        attention = torch.where(adj > 0, e, zero_vec)
        attention = F.softmax(attention, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)
        return F.elu(h_prime) if self.concat else h_prime

    def _prepare_attentional_mechanism_input(self, Wh):
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        e = Wh1 + Wh2.T
        return self.leakyrelu(e)


class GAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout, alpha, nheads):
        super().__init__()
        self.dropout = dropout
        self.attentions = [GraphAttentionLayer(nfeat, nhid, dropout=dropout, alpha=alpha,
                                               concat=True) for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module("attention_{}".format(i), attention)
        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout=dropout, alpha=alpha,
                                           concat=False)

    def forward(self, x, adj):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        return F.log_softmax(x, dim=1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.uniform(-0.5, 0.5, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    return (correct.sum() / len(labels)).item()


def main(steps=10, compile=False, seed=0, n=24, nfeat=10, nclass=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    labels = torch.LongTensor(rng.integers(0, nclass, n))
    features = torch.FloatTensor(rng.normal(0, 1, (n, nfeat)) + labels.numpy()[:, None] * 0.5)
    adj = (rng.random((n, n)) < 0.2).astype(np.float32)
    adj = torch.FloatTensor(np.maximum(adj, adj.T) + np.eye(n, dtype=np.float32))
    idx_train = torch.LongTensor(range(n // 2))
    idx_val = torch.LongTensor(range(n // 2, n))
    model = GAT(nfeat=nfeat, nhid=6, nclass=nclass, dropout=0.0, alpha=0.2, nheads=3)
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def train(features, adj):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        return loss_train

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train = torch.compile(train)
    losses, val_losses, accs = [], [], []
    for epoch in range(steps):
        losses.append(train(features, adj).data.item())
        model.eval()
        with torch.no_grad():
            output = model(features, adj)
        val_losses.append(F.nll_loss(output[idx_val], labels[idx_val]).item())
        accs.append(accuracy(output[idx_val], labels[idx_val]))
    return {"losses": losses, "val_losses": val_losses, "accuracy": accs}
