"""A DETR-style query decoder written with ``nn.MultiheadAttention(batch_first=True)``
rather than ``nn.TransformerDecoder``: learned queries (``query_embed.weight`` expanded
over the batch) with a positional embedding added to queries and keys but not values,
self-attention returning per-head weights (``need_weights=True,
average_attn_weights=False``), cross-attention over flattened feature maps of images of
different sizes padded to one size and masked by ``key_padding_mask`` (a bool mask of the
padded cells, downsampled by ``F.interpolate(mask[None].float(), size=...).to(torch.bool)
[0]``), post-norm layers, every layer's output kept for auxiliary losses (``torch.stack``
of the intermediate outputs, the heads applied to each), class logits with a no-object
class weighted down in ``F.cross_entropy(weight=)`` and boxes by ``sigmoid`` with an L1
loss against targets assigned by a fixed order; ``AdamW`` with ``clip_grad_norm_``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class DecoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, tgt, memory, query_pos, pos, memory_key_padding_mask):
        q = k = tgt + query_pos
        tgt2, weights = self.self_attn(q, k, value=tgt, need_weights=True,
                                       average_attn_weights=False)
        tgt = self.norm1(tgt + tgt2)
        tgt2 = self.cross_attn(query=tgt + query_pos, key=memory + pos, value=memory,
                               key_padding_mask=memory_key_padding_mask)[0]
        tgt = self.norm2(tgt + tgt2)
        return self.norm3(tgt + self.ff(tgt)), weights


class QueryDecoder(nn.Module):
    def __init__(self, d=16, heads=2, queries=5, classes=3, layers=2):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, d, 3, stride=2, padding=1), nn.ReLU())
        self.row_embed = nn.Parameter(torch.zeros(8, d // 2))
        self.col_embed = nn.Parameter(torch.zeros(8, d // 2))
        self.query_embed = nn.Embedding(queries, d)
        self.layers = nn.ModuleList(DecoderLayer(d, heads) for _ in range(layers))
        self.class_embed = nn.Linear(d, classes + 1)
        self.bbox_embed = nn.Linear(d, 4)

    def forward(self, images, mask):
        features = self.backbone(images)
        b, d, h, w = features.shape
        mask = F.interpolate(mask[None].float(), size=(h, w)).to(torch.bool)[0]
        pos = torch.cat([self.col_embed[:w].unsqueeze(0).repeat(h, 1, 1),
                         self.row_embed[:h].unsqueeze(1).repeat(1, w, 1)], dim=-1)
        pos = pos.flatten(0, 1).unsqueeze(0).expand(b, -1, -1)
        memory = features.flatten(2).transpose(1, 2)
        query_pos = self.query_embed.weight.unsqueeze(0).expand(b, -1, -1)
        tgt = torch.zeros_like(query_pos)
        intermediate, maps = [], []
        for layer in self.layers:
            tgt, weights = layer(tgt, memory, query_pos, pos, mask.flatten(1))
            intermediate.append(tgt)
            maps.append(weights)
        hs = torch.stack(intermediate)
        return self.class_embed(hs), self.bbox_embed(hs).sigmoid(), maps[-1]


def batch(rng, n=3, size=8):
    images = np.zeros((n, 3, size, size), np.float32)
    mask = np.ones((n, size, size), bool)
    for i, (hh, ww) in enumerate([(8, 8), (6, 8), (8, 4)][:n]):
        images[i, :, :hh, :ww] = rng.normal(0, 1, (3, hh, ww))
        mask[i, :hh, :ww] = False
    labels = rng.integers(0, 3, (n, 2))
    boxes = rng.uniform(0.1, 0.9, (n, 2, 4)).astype(np.float32)
    return (torch.from_numpy(images), torch.from_numpy(mask), torch.from_numpy(labels),
            torch.from_numpy(boxes))


def set_loss(logits, boxes, labels, target_boxes, empty_weight):
    layers, b, q, c = logits.shape
    target_classes = torch.full((b, q), c - 1, dtype=torch.int64)
    target_classes[:, :labels.shape[1]] = labels
    loss = 0
    for i in range(layers):   # the last layer's loss and the auxiliary ones
        loss = loss + F.cross_entropy(logits[i].transpose(1, 2), target_classes,
                                      weight=empty_weight)
        loss = loss + F.l1_loss(boxes[i, :, :labels.shape[1]], target_boxes)
    return loss


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = QueryDecoder()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    empty_weight = torch.ones(4)
    empty_weight[-1] = 0.1
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    net = torch.compile(model) if compile == "model" else model

    def step(images, mask, labels, boxes):
        optimizer.zero_grad()
        logits, pred_boxes, weights = net(images, mask)
        loss = set_loss(logits, pred_boxes, labels, boxes, empty_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        return loss, weights.detach()

    if compile is True:
        step = torch.compile(step)
    losses, heads = [], []
    for _ in range(steps):
        loss, weights = step(*batch(rng))
        losses.append(loss.item())
        heads.append(list(weights.shape))
    model.eval()
    images, mask, _, _ = batch(rng)
    with torch.no_grad():
        logits, boxes, _ = net(images, mask)
    return {"losses": losses, "heads": heads, "logits": logits[-1].flatten().tolist(),
            "boxes": boxes[-1].flatten().tolist()}
