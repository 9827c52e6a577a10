"""A RotatE knowledge-graph embedding trained the way the KnowledgeGraphEmbedding
repository's model is: entity embeddings of twice the relation's width as ``nn.Parameter``
tables read by ``torch.index_select``, complex numbers kept as real and imaginary halves
by ``torch.chunk(..., 2, dim=2)``, relation phases ``relation / (embedding_range / pi)``
turned into ``torch.cos``/``torch.sin``, the rotated head minus the tail as a
``torch.stack([re, im], dim=0).norm(dim=0)`` distance summed over dims, ``gamma -
score``; negative samples in "head-batch" and "tail-batch" modes (the positive sample
broadcast against ``(b, k)`` negatives by ``unsqueeze``), self-adversarial weights
``F.softmax(negative_score * alpha, dim=1).detach()``, ``F.logsigmoid`` of the positive
and of the negated negatives, subsampling weights; filtered ranking evaluation that adds
a large bias at the known triples, ``argsort(descending=True)`` and
``(argsort == positive).nonzero()`` for the ranks, MRR and Hits@k."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_ENTITY, N_RELATION, DIM = 12, 3, 4


class KGEModel(nn.Module):
    def __init__(self, gamma=6.0, epsilon=2.0):
        super().__init__()
        self.gamma = nn.Parameter(torch.Tensor([gamma]), requires_grad=False)
        self.embedding_range = nn.Parameter(torch.Tensor([(gamma + epsilon) / DIM]),
                                            requires_grad=False)
        self.entity_embedding = nn.Parameter(torch.zeros(N_ENTITY, DIM * 2))
        self.relation_embedding = nn.Parameter(torch.zeros(N_RELATION, DIM))

    def forward(self, sample, mode="single"):
        if mode == "single":
            head = torch.index_select(self.entity_embedding, 0, sample[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, 0,
                                          sample[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, 0, sample[:, 2]).unsqueeze(1)
        elif mode == "head-batch":
            tail_part, head_part = sample
            batch_size, negative_sample_size = head_part.size(0), head_part.size(1)
            head = torch.index_select(self.entity_embedding, 0, head_part.view(-1)).view(
                batch_size, negative_sample_size, -1)
            relation = torch.index_select(self.relation_embedding, 0,
                                          tail_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, 0, tail_part[:, 2]).unsqueeze(1)
        else:
            head_part, tail_part = sample
            batch_size, negative_sample_size = tail_part.size(0), tail_part.size(1)
            head = torch.index_select(self.entity_embedding, 0, head_part[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, 0,
                                          head_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, 0, tail_part.view(-1)).view(
                batch_size, negative_sample_size, -1)
        return self.rotate(head, relation, tail, mode)

    def rotate(self, head, relation, tail, mode):
        pi = 3.14159265358979323846
        re_head, im_head = torch.chunk(head, 2, dim=2)
        re_tail, im_tail = torch.chunk(tail, 2, dim=2)
        phase_relation = relation / (self.embedding_range.item() / pi)
        re_relation = torch.cos(phase_relation)
        im_relation = torch.sin(phase_relation)
        if mode == "head-batch":
            re_score = re_relation * re_tail + im_relation * im_tail
            im_score = re_relation * im_tail - im_relation * re_tail
            re_score = re_score - re_head
            im_score = im_score - im_head
        else:
            re_score = re_head * re_relation - im_head * im_relation
            im_score = re_head * im_relation + im_head * re_relation
            re_score = re_score - re_tail
            im_score = im_score - im_tail
        score = torch.stack([re_score, im_score], dim=0)
        score = score.norm(dim=0)
        return self.gamma.item() - score.sum(dim=2)


def train_step(model, optimizer, positive_sample, negative_sample, subsampling_weight, mode,
               adversarial_temperature=1.0, regularization=1e-3):
    model.train()
    optimizer.zero_grad()
    negative_score = model((positive_sample, negative_sample), mode=mode)
    negative_score = (F.softmax(negative_score * adversarial_temperature, dim=1).detach()
                      * F.logsigmoid(-negative_score)).sum(dim=1)
    positive_score = model(positive_sample)
    positive_score = F.logsigmoid(positive_score).squeeze(dim=1)
    positive_sample_loss = - (subsampling_weight * positive_score).sum() / subsampling_weight.sum()
    negative_sample_loss = - (subsampling_weight * negative_score).sum() / subsampling_weight.sum()
    loss = (positive_sample_loss + negative_sample_loss) / 2
    loss = loss + regularization * (model.entity_embedding.norm(p=3) ** 3
                                    + model.relation_embedding.norm(p=3).norm(p=3) ** 3)
    loss.backward()
    optimizer.step()
    return loss, positive_sample_loss.detach(), negative_sample_loss.detach()


@torch.no_grad()
def evaluate(model, triples, known):
    ranks = []
    for h, r, t in triples:
        candidates = torch.stack([torch.full((N_ENTITY,), h), torch.full((N_ENTITY,), r),
                                  torch.arange(N_ENTITY)], dim=1)
        score = model(candidates).squeeze(1)
        filter_bias = torch.zeros(N_ENTITY)
        for (kh, kr, kt) in known:
            if kh == h and kr == r and kt != t:
                filter_bias[kt] = -1.0
        score = score + filter_bias * 1000
        argsort = torch.argsort(score, dim=0, descending=True)
        ranking = (argsort == t).nonzero()
        ranks.append(1 + ranking.item())
    ranks = torch.tensor(ranks, dtype=torch.float)
    return [(1.0 / ranks).mean().item(), (ranks <= 1).float().mean().item(),
            (ranks <= 3).float().mean().item()]


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = KGEModel()
    r = model.embedding_range.item()
    model.entity_embedding.data.copy_(torch.from_numpy(
        rng.uniform(-r, r, (N_ENTITY, 2 * DIM)).astype(np.float32)))
    model.relation_embedding.data.copy_(torch.from_numpy(
        rng.uniform(-r, r, (N_RELATION, DIM)).astype(np.float32)))
    triples = [(int(h), int(rel), int((h + 3 * rel + 1) % N_ENTITY))
               for h, rel in zip(rng.integers(0, N_ENTITY, 24), rng.integers(0, N_RELATION, 24))]
    optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=0.05)
    net = torch.compile(model) if compile == "model" else model
    step = torch.compile(train_step) if compile is True else train_step
    losses = []
    for i in range(steps):
        chosen = rng.choice(len(triples), 6, replace=False)
        positive = torch.tensor([triples[j] for j in chosen])
        negative = torch.from_numpy(rng.integers(0, N_ENTITY, (6, 5)))
        weight = torch.from_numpy(1 / np.sqrt(rng.integers(2, 6, 6)).astype(np.float32))
        mode = "head-batch" if i % 2 == 0 else "tail-batch"
        losses.append([v.item() for v in step(net, optimizer, positive, negative, weight,
                                              mode)])
    metrics = evaluate(net, triples[:6], triples)
    return {"losses": losses, "metrics": metrics,
            "phase": (model.relation_embedding / model.embedding_range * math.pi)
            .flatten().tolist()}
