"""A DETR-style set prediction model (Carion et al.) written the way the reference code is,
with its Hungarian matcher replaced by a greedy one made of tensor ops (no SciPy): box
helpers ``box_cxcywh_to_xyxy`` by ``x.unbind(-1)`` and ``torch.stack(b, dim=-1)``,
``generalized_box_iou`` by ``torch.max(boxes1[:, None, :2], boxes2[:, :2])``,
``.clamp(min=0)`` and ``torch.diag``; a matcher under ``@torch.no_grad()`` building
``C = cost_bbox * torch.cdist(out_bbox, tgt_bbox, p=1) - out_prob[:, tgt_ids] - cost_giou *
generalized_box_iou(...)``, ``C.view(bs, num_queries, -1)``, ``C.split(sizes, -1)`` and
claiming queries by ``argmin`` with ``c[i] = float("inf")``; a ``SetCriterion`` with
``register_buffer('empty_weight', ...)`` as the class weights of ``F.cross_entropy(
src_logits.transpose(1, 2), target_classes, self.empty_weight)``, ``target_classes =
torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64)`` filled by
``target_classes[idx] = target_classes_o``, ``_get_src_permutation_idx`` with
``torch.full_like(src, i)``, ``F.l1_loss(..., reduction='none')`` and the targets as a list
of dicts; the model: a conv backbone flattened by ``.flatten(2).permute(2, 0, 1)``, sine
positions, learned queries ``query_embed.weight.unsqueeze(1).repeat(1, bs, 1)`` through
``nn.TransformerDecoder`` (sequence-first), an MLP box head with ``.sigmoid()``, AdamW with a
smaller lr for the backbone by parameter groups, and ``clip_grad_norm_(..., 0.1)``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1, boxes2):
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union, union


def generalized_box_iou(boxes1, boxes2):
    iou, union = box_iou(boxes1, boxes2)
    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    area = wh[:, :, 0] * wh[:, :, 1]
    return iou - (area - union) / area


class GreedyMatcher(nn.Module):
    def __init__(self, cost_class=1, cost_bbox=5, cost_giou=2):
        super().__init__()
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou

    @torch.no_grad()
    def forward(self, outputs, targets):
        bs, num_queries = outputs["pred_logits"].shape[:2]
        out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
        out_bbox = outputs["pred_boxes"].flatten(0, 1)
        tgt_ids = torch.cat([v["labels"] for v in targets])
        tgt_bbox = torch.cat([v["boxes"] for v in targets])
        cost_class = -out_prob[:, tgt_ids]
        cost_bbox = torch.cdist(out_bbox, tgt_bbox, p=1)
        cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(out_bbox), box_cxcywh_to_xyxy(tgt_bbox))
        C = self.cost_bbox * cost_bbox + self.cost_class * cost_class + self.cost_giou * cost_giou
        C = C.view(bs, num_queries, -1)
        sizes = [len(v["boxes"]) for v in targets]
        indices = []
        for i, c in enumerate(C.split(sizes, -1)):
            c = c[i].clone()
            rows = []
            for j in range(c.shape[1]):
                q = c[:, j].argmin()
                rows.append(q)
                c[q] = float("inf")
            indices.append((torch.stack(rows), torch.arange(len(rows))))
        return indices


class SetCriterion(nn.Module):
    def __init__(self, num_classes, matcher, eos_coef, weight_dict):
        super().__init__()
        self.num_classes = num_classes
        self.matcher = matcher
        self.weight_dict = weight_dict
        empty_weight = torch.ones(self.num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer('empty_weight', empty_weight)

    def _get_src_permutation_idx(self, indices):
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for (src, _) in indices])
        return batch_idx, src_idx

    def loss_labels(self, outputs, targets, indices):
        src_logits = outputs['pred_logits']
        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
        target_classes = torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64)
        target_classes[idx] = target_classes_o
        loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)
        return {'loss_ce': loss_ce}

    def loss_boxes(self, outputs, targets, indices, num_boxes):
        idx = self._get_src_permutation_idx(indices)
        src_boxes = outputs['pred_boxes'][idx]
        target_boxes = torch.cat([t['boxes'][i] for t, (_, i) in zip(targets, indices)], dim=0)
        loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction='none')
        loss_giou = 1 - torch.diag(generalized_box_iou(box_cxcywh_to_xyxy(src_boxes),
                                                       box_cxcywh_to_xyxy(target_boxes)))
        return {'loss_bbox': loss_bbox.sum() / num_boxes, 'loss_giou': loss_giou.sum() / num_boxes}

    def forward(self, outputs, targets):
        indices = self.matcher(outputs, targets)
        num_boxes = max(sum(len(t["labels"]) for t in targets), 1)
        losses = {}
        losses.update(self.loss_labels(outputs, targets, indices))
        losses.update(self.loss_boxes(outputs, targets, indices, num_boxes))
        return losses


class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        h = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


class DETR(nn.Module):
    def __init__(self, num_classes=3, num_queries=5, hidden_dim=16, nheads=2):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.input_proj = nn.Conv2d(16, hidden_dim, kernel_size=1)
        layer = nn.TransformerDecoderLayer(hidden_dim, nheads, 32, dropout=0.0)
        self.decoder = nn.TransformerDecoder(layer, num_layers=2, norm=nn.LayerNorm(hidden_dim))
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = MLP(hidden_dim, hidden_dim, 4, 3)
        self.hidden_dim = hidden_dim

    def position_embedding(self, h, w):
        y_embed = torch.arange(1, h + 1, dtype=torch.float32)[:, None].expand(h, w)
        x_embed = torch.arange(1, w + 1, dtype=torch.float32)[None, :].expand(h, w)
        num_pos_feats = self.hidden_dim // 2
        dim_t = torch.arange(num_pos_feats // 2, dtype=torch.float32)
        dim_t = 10000 ** (2 * dim_t / num_pos_feats)
        pos_x = x_embed[:, :, None] * (2 * math.pi / w) / dim_t
        pos_y = y_embed[:, :, None] * (2 * math.pi / h) / dim_t
        pos = torch.cat([pos_y.sin(), pos_y.cos(), pos_x.sin(), pos_x.cos()], dim=2)
        return pos.flatten(0, 1).unsqueeze(1)

    def forward(self, samples):
        src = self.input_proj(self.backbone(samples))
        bs, c, h, w = src.shape
        memory = src.flatten(2).permute(2, 0, 1) + self.position_embedding(h, w)
        query_embed = self.query_embed.weight.unsqueeze(1).repeat(1, bs, 1)
        hs = self.decoder(query_embed, memory).transpose(0, 1)
        return {'pred_logits': self.class_embed(hs), 'pred_boxes': self.bbox_embed(hs).sigmoid()}


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.normal(0, 1 / math.sqrt(max(1, np.prod(v.shape[1:]))),
                                      tuple(v.shape)).astype(np.float32))
        if v.dim() > 1 else torch.ones_like(v) if "norm" in name and name.endswith("weight")
        else torch.tensor(rng.normal(0, 0.05, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=2, size=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = DETR()
    init_weights(model, seed)
    weight_dict = {'loss_ce': 1, 'loss_bbox': 5, 'loss_giou': 2}
    criterion = SetCriterion(3, GreedyMatcher(), eos_coef=0.1, weight_dict=weight_dict)
    param_dicts = [
        {"params": [p for n, p in model.named_parameters() if "backbone" not in n]},
        {"params": [p for n, p in model.named_parameters() if "backbone" in n], "lr": 1e-4}]
    optimizer = torch.optim.AdamW(param_dicts, lr=1e-3, weight_decay=1e-4)
    data = []
    for _ in range(steps):
        imgs = torch.tensor(rng.normal(0, 1, (batch, 3, size, size)).astype(np.float32))
        targets = []
        for n in (2, 3)[:batch]:
            centre = rng.uniform(0.3, 0.7, (n, 2))
            wh = rng.uniform(0.1, 0.3, (n, 2))
            targets.append({"labels": torch.tensor(rng.integers(0, 3, n)),
                            "boxes": torch.tensor(np.concatenate([centre, wh], 1),
                                                  dtype=torch.float32)})
        data.append((imgs, targets))

    def train_one_step(samples, targets):
        outputs = model(samples)
        loss_dict = criterion(outputs, targets)
        losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
        optimizer.zero_grad()
        losses.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        return losses, loss_dict

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_one_step = torch.compile(train_one_step)
    losses, giou = [], []
    for samples, targets in data:
        model.train()
        loss, loss_dict = train_one_step(samples, targets)
        losses.append(loss.item())
        giou.append(loss_dict["loss_giou"].item())
    model.eval()
    with torch.no_grad():
        out = model(data[0][0])
        matched = [src.tolist() for src, _ in criterion.matcher(out, data[0][1])]
    return {"losses": losses, "giou": giou, "matched": sum(matched, []),
            "boxes": out["pred_boxes"][0, :2].flatten().tolist()}
