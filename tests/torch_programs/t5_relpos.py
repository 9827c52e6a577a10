"""A small T5-style encoder-decoder written the way Hugging Face's modelling code is:
relative position buckets (``torch.abs``, ``torch.log`` of int positions cast to float,
``.to(torch.long)``, ``torch.min`` against ``torch.full_like``, ``torch.where``,
``torch.zeros_like``) computed once in the first layer and passed on as a position bias,
bidirectional in the encoder and causal in the decoder; a layer norm without mean or bias
(``hidden.to(torch.float32).pow(2).mean(-1, keepdim=True)`` then ``torch.rsqrt``);
attention without the 1/sqrt(d) scale; an extended attention mask filled with
``torch.finfo(dtype).min``; a gated-GELU feed-forward (the tanh approximation written out,
``math.sqrt(2.0 / math.pi)``, ``torch.pow(x, 3.0)``); ``_shift_right`` of the labels by
``new_zeros`` and ``masked_fill_`` of -100; a tied head scaled by ``d_model ** -0.5``;
``CrossEntropyLoss(ignore_index=-100)``, ``Adafactor``-free AdamW with
``get_linear_schedule_with_warmup`` written as a ``LambdaLR``; greedy decoding with the
compiled model."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    vocab_size = 40
    d_model = 24
    d_kv = 6
    num_heads = 4
    d_ff = 40
    num_layers = 2
    relative_attention_num_buckets = 8
    relative_attention_max_distance = 16
    layer_norm_epsilon = 1e-6
    pad_token_id = 0
    decoder_start_token_id = 0


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                               * (input + 0.044715 * torch.pow(input, 3.0))))


class T5DenseGatedActDense(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.act = NewGELUActivation()

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        return self.wo(hidden_gelu * hidden_linear)


class T5Attention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.n_heads, self.key_value_proj_dim = config.num_heads, config.d_kv
        self.inner_dim = self.n_heads * self.key_value_proj_dim
        self.q = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, config.d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                                  max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position,
                                           torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact) * (num_buckets - max_exact)).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large,
                                                        num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder),
            num_buckets=self.num_buckets, max_distance=self.max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        is_cross_attention = key_value_states is not None
        source = key_value_states if is_cross_attention else hidden_states

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim
                               ).transpose(1, 2)

        query_states = shape(self.q(hidden_states))
        key_states, value_states = shape(self.k(source)), shape(self.v(source))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            key_length = key_states.shape[-2]
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, seq_length, key_length),
                                            dtype=scores.dtype)
            else:
                position_bias = self.compute_bias(seq_length, key_length)
            if mask is not None:
                position_bias = position_bias + mask
        scores += position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().view(batch_size, -1,
                                                                    self.inner_dim)
        return self.o(attn_output), position_bias


class T5Block(nn.Module):
    def __init__(self, config, has_relative_attention_bias, is_decoder):
        super().__init__()
        self.is_decoder = is_decoder
        eps = config.layer_norm_epsilon
        self.self_norm = T5LayerNorm(config.d_model, eps)
        self.self_attention = T5Attention(config, has_relative_attention_bias, is_decoder)
        if is_decoder:
            self.cross_norm = T5LayerNorm(config.d_model, eps)
            self.cross_attention = T5Attention(config, False, is_decoder)
        self.ff_norm = T5LayerNorm(config.d_model, eps)
        self.ff = T5DenseGatedActDense(config)

    def forward(self, hidden_states, attention_mask, position_bias, encoder_hidden_states=None,
                encoder_attention_mask=None, encoder_decoder_position_bias=None):
        out, position_bias = self.self_attention(self.self_norm(hidden_states), attention_mask,
                                                 position_bias=position_bias)
        hidden_states = hidden_states + out
        if self.is_decoder:
            out, encoder_decoder_position_bias = self.cross_attention(
                self.cross_norm(hidden_states), encoder_attention_mask,
                key_value_states=encoder_hidden_states,
                position_bias=encoder_decoder_position_bias)
            hidden_states = hidden_states + out
        hidden_states = hidden_states + self.ff(self.ff_norm(hidden_states))
        return hidden_states, position_bias, encoder_decoder_position_bias


class T5Stack(nn.Module):
    def __init__(self, config, embed_tokens, is_decoder):
        super().__init__()
        self.embed_tokens, self.is_decoder = embed_tokens, is_decoder
        self.block = nn.ModuleList([T5Block(config, bool(i == 0), is_decoder)
                                    for i in range(config.num_layers)])
        self.final_layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def get_extended_attention_mask(self, attention_mask, dtype):
        if self.is_decoder:
            seq_length = attention_mask.shape[1]
            seq_ids = torch.arange(seq_length)
            causal_mask = seq_ids[None, None, :].repeat(attention_mask.shape[0], seq_length,
                                                        1) <= seq_ids[None, :, None]
            causal_mask = causal_mask.to(attention_mask.dtype)
            extended = causal_mask[:, None, :, :] * attention_mask[:, None, None, :]
        else:
            extended = attention_mask[:, None, None, :]
        extended = extended.to(dtype=dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask=None, encoder_hidden_states=None,
                encoder_attention_mask=None):
        inputs_embeds = self.embed_tokens(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape, dtype=torch.long)
        mask = self.get_extended_attention_mask(attention_mask, inputs_embeds.dtype)
        encoder_mask = None
        if encoder_attention_mask is not None:
            encoder_mask = (1.0 - encoder_attention_mask[:, None, None, :].to(
                inputs_embeds.dtype)) * torch.finfo(inputs_embeds.dtype).min
        hidden_states, position_bias, cross_bias = inputs_embeds, None, None
        for layer_module in self.block:
            hidden_states, position_bias, cross_bias = layer_module(
                hidden_states, mask, position_bias, encoder_hidden_states, encoder_mask,
                cross_bias)
        return self.final_layer_norm(hidden_states)


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared, is_decoder=False)
        self.decoder = T5Stack(config, self.shared, is_decoder=True)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.shared.weight

    def _shift_right(self, input_ids):
        shifted_input_ids = input_ids.new_zeros(input_ids.shape)
        shifted_input_ids[..., 1:] = input_ids[..., :-1].clone()
        shifted_input_ids[..., 0] = self.config.decoder_start_token_id
        shifted_input_ids.masked_fill_(shifted_input_ids == -100, self.config.pad_token_id)
        return shifted_input_ids

    def forward(self, input_ids, attention_mask=None, labels=None, decoder_input_ids=None,
                encoder_outputs=None):
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        if labels is not None and decoder_input_ids is None:
            decoder_input_ids = self._shift_right(labels)
        sequence_output = self.decoder(decoder_input_ids,
                                       encoder_hidden_states=encoder_outputs,
                                       encoder_attention_mask=attention_mask)
        sequence_output = sequence_output * (self.config.d_model ** -0.5)
        lm_logits = self.lm_head(sequence_output)
        loss = None
        if labels is not None:
            loss_fct = nn.CrossEntropyLoss(ignore_index=-100)
            loss = loss_fct(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1))
        return loss, lm_logits, encoder_outputs


def init_weights(model, rng):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.from_numpy((1 + rng.normal(0, 0.05, p.shape)).astype(np.float32)))
            else:
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step)
                   / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    config = Config()
    model = T5ForConditionalGeneration(config)
    init_weights(model, rng)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, 1, steps + 1)
    net = torch.compile(model) if compile == "model" else model

    def train_step(input_ids, attention_mask, labels):
        optimizer.zero_grad()
        loss, logits, _ = net(input_ids, attention_mask=attention_mask, labels=labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    if compile is True:
        train_step = torch.compile(train_step)
    losses = []
    for _ in range(steps):
        input_ids = torch.from_numpy(rng.integers(1, config.vocab_size, (3, 11)))
        lengths = torch.tensor([11, 8, 5])
        attention_mask = (torch.arange(11)[None, :] < lengths[:, None]).long()
        input_ids = input_ids * attention_mask
        labels = torch.from_numpy(rng.integers(1, config.vocab_size, (3, 7)))
        labels[1, 5:] = -100
        losses.append(train_step(input_ids, attention_mask, labels).item())
        scheduler.step()
    model.eval()
    source = torch.from_numpy(rng.integers(1, config.vocab_size, (2, 9)))
    with torch.no_grad():
        _, _, memory = net(source, decoder_input_ids=torch.zeros(2, 1, dtype=torch.long))
        decoded = torch.full((2, 1), config.decoder_start_token_id, dtype=torch.long)
        for _ in range(4):
            _, logits, _ = net(source, decoder_input_ids=decoded, encoder_outputs=memory)
            decoded = torch.cat([decoded, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    buckets = T5Attention._relative_position_bucket(
        torch.arange(-20, 21)[None, :], bidirectional=False, num_buckets=16, max_distance=12)
    return {"losses": losses, "decoded": decoded.flatten().tolist(),
            "memory": memory[:, :3].norm(dim=-1).flatten().tolist(),
            "buckets": buckets.flatten().tolist(),
            "lr": [scheduler.get_last_lr()[0]]}
