"""A sequence classifier fine-tuned the Hugging Face way, written without the library: a
``PretrainedConfig``-like dataclass, embeddings with ``position_ids`` registered as a
non-persistent buffer (``torch.arange(n).expand((1, -1))``, ``persistent=False``) and
``token_type_ids`` defaulting to zeros from ``torch.zeros(input_shape, dtype=torch.long)``,
an extended attention mask ``(1.0 - mask[:, None, None, :]) * torch.finfo(dtype).min``,
attention with ``transpose_for_scores`` (``x.view(new_x_shape).permute(0, 2, 1, 3)``),
``math.sqrt(head_size)`` scaling, ``nn.functional.gelu``, ``LayerNorm(eps=1e-12)``, a pooler
(``tanh`` of the first token), ``output_hidden_states`` returned as a tuple in a
``ModelOutput``-style dataclass; fine-tuning with AdamW whose groups leave out
``["bias", "LayerNorm.weight"]`` by name, ``get_linear_schedule_with_warmup`` by
``LambdaLR``, gradient accumulation (``loss / accumulation_steps``, ``clip_grad_norm_``
before each optimiser step), and evaluation under ``torch.inference_mode()``.
Data: token sequences of varying padded length whose label is whether a marker token
appears before another."""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class Config:
    vocab_size: int = 20
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 16
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    num_labels: int = 2


@dataclass
class SequenceClassifierOutput:
    loss: torch.Tensor = None
    logits: torch.Tensor = None
    hidden_states: tuple = None


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.register_buffer("position_ids",
                             torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids, token_type_ids=None):
        input_shape = input_ids.size()
        seq_length = input_shape[1]
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = torch.zeros(input_shape, dtype=torch.long)
        embeddings = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
                      + self.position_embeddings(position_ids))
        return self.LayerNorm(embeddings)


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask):
        attention = self.attention_output(self.attention(hidden_states, attention_mask))
        hidden_states = self.attention_LayerNorm(attention + hidden_states)
        intermediate = nn.functional.gelu(self.intermediate(hidden_states))
        return self.output_LayerNorm(self.output(intermediate) + hidden_states)


class SequenceClassifier(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layer = nn.ModuleList([Layer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def get_extended_attention_mask(self, attention_mask, dtype=torch.float32):
        extended = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=False):
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape)
        extended = self.get_extended_attention_mask(attention_mask)
        hidden_states = self.embeddings(input_ids)
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended)
            if output_hidden_states:
                all_hidden_states = all_hidden_states + (hidden_states,)
        pooled = torch.tanh(self.pooler(hidden_states[:, 0]))
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            loss = nn.CrossEntropyLoss()(logits.view(-1, self.config.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=all_hidden_states)


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step: int):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step)
                   / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def batch_of(rng, n, length):
    ids = rng.integers(3, 20, (n, length))
    lengths = rng.integers(length // 2, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    labels = rng.integers(0, 2, n)
    for i in range(n):
        a, b = sorted(rng.choice(np.arange(1, lengths[i]), 2, replace=False))
        ids[i, a], ids[i, b] = (1, 2) if labels[i] else (2, 1)
    ids = ids * mask
    return torch.tensor(ids), torch.tensor(mask), torch.tensor(labels)


def init_weights(model, rng):
    state = model.state_dict()
    for name, v in state.items():
        if "LayerNorm" in name:
            continue
        state[name] = torch.tensor(rng.normal(0, 0.1, tuple(v.shape)).astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=8, accumulation_steps=2):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = SequenceClassifier(Config())
    init_weights(model, rng)
    no_decay = ["bias", "LayerNorm.weight"]
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(grouped, lr=3e-3, eps=1e-8)
    scheduler = get_linear_schedule_with_warmup(optimizer, 1, steps)
    micro = [batch_of(rng, batch, 12 if i % 2 == 0 else 10)
             for i in range(steps * accumulation_steps)]
    forward = model

    def training_step(input_ids, attention_mask, labels):
        outputs = forward(input_ids, attention_mask=attention_mask, labels=labels)
        loss = outputs.loss / accumulation_steps
        loss.backward()
        return outputs.loss

    if compile == "model":
        forward = torch.compile(model)
    elif compile:
        training_step = torch.compile(training_step)
    model.train()
    losses, lrs = [], []
    model.zero_grad()
    for i, (ids, mask, labels) in enumerate(micro):
        loss = training_step(ids, mask, labels)
        if (i + 1) % accumulation_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            model.zero_grad()
            losses.append(loss.item())
            lrs.append(scheduler.get_last_lr()[0])
    model.eval()
    ids, mask, labels = batch_of(rng, 32, 12)
    with torch.inference_mode():
        out = model(ids, attention_mask=mask, output_hidden_states=True)
    predictions = out.logits.argmax(-1)
    return {"losses": losses, "lrs": lrs,
            "accuracy": [(predictions == labels).float().mean().item()],
            "logits": out.logits[:4].flatten().tolist(),
            "hidden_norms": [h.norm().item() for h in out.hidden_states],
            "state_keys": [len(model.state_dict())]}
