"""A sequence-to-sequence GRU (encoder and decoder) and its training loop, written the way
the classic PyTorch translation tutorial is, batched: an embedding and a GRU encoder whose
last hidden state starts the decoder, a decoder stepping one token at a time (embedding,
ReLU, GRU, linear, log_softmax) for the target's length, teacher forcing (the target token
as the next input) or free running (the decoder's own ``topk`` guess, detached), NLLLoss
summed over the steps, ``clip_grad_norm_`` on each model, and two optimisers. Whether a
batch uses teacher forcing is drawn with Python's ``random`` outside the step and passed in,
a bool: one graph each. The task (reverse a sequence of random tokens) is learnable."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

SOS_token = 0
VOCAB, HIDDEN, LENGTH = 12, 16, 5


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)

    def forward(self, input):
        embedded = self.embedding(input)
        output, hidden = self.gru(embedded)
        return output, hidden


class DecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)

    def forward_step(self, input, hidden):
        output = self.embedding(input)
        output = F.relu(output)
        output, hidden = self.gru(output, hidden)
        output = self.out(output)
        return output, hidden

    def forward(self, encoder_hidden, target_tensor, teacher_forcing):
        batch_size = encoder_hidden.size(1)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        for i in range(target_tensor.size(1)):
            decoder_output, decoder_hidden = self.forward_step(decoder_input, decoder_hidden)
            decoder_outputs.append(decoder_output)
            if teacher_forcing:
                decoder_input = target_tensor[:, i].unsqueeze(1)   # teacher forcing
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()   # its own guess as the next input
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        return F.log_softmax(decoder_outputs, dim=-1), decoder_hidden


def init_weights(model, rng):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    model.load_state_dict({
        name: torch.tensor(rng.uniform(-0.3, 0.3, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch_size=8, clip=1.0):
    random.seed(seed)
    rng = np.random.default_rng(seed)
    encoder, decoder = EncoderRNN(VOCAB, HIDDEN), DecoderRNN(HIDDEN, VOCAB)
    init_weights(encoder, rng)
    init_weights(decoder, rng)
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
    decoder_optimizer = optim.SGD(decoder.parameters(), lr=0.1, momentum=0.5)
    criterion = nn.NLLLoss()
    tokens = rng.integers(1, VOCAB, (steps, batch_size, LENGTH))

    def train_step(input_tensor, target_tensor, teacher_forcing):
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _ = decoder(encoder_hidden, target_tensor, teacher_forcing)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)),
                         target_tensor.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(encoder.parameters(), clip)
        norm = torch.nn.utils.clip_grad_norm_(decoder.parameters(), clip)
        encoder_optimizer.step()
        decoder_optimizer.step()
        return loss, norm

    if compile == "model":  # as train.py scripts do: the modules keep their methods
        encoder, decoder = torch.compile(encoder), torch.compile(decoder)
    elif compile:
        train_step = torch.compile(train_step)
    losses, norms, forced = [], [], []
    for epoch in range(2):
        for i in range(steps):
            input_tensor = torch.tensor(tokens[i], dtype=torch.long)
            target_tensor = torch.flip(input_tensor, dims=[1])
            teacher_forcing = random.random() < 0.5
            loss, norm = train_step(input_tensor, target_tensor, teacher_forcing)
            losses.append(loss.item())
            norms.append(norm.item())
            forced.append(int(teacher_forcing))
    with torch.no_grad():   # greedy decoding of the first batch
        input_tensor = torch.tensor(tokens[0], dtype=torch.long)
        _, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _ = decoder(encoder_hidden, input_tensor, False)
        decoded = decoder_outputs.argmax(-1)
    return {"losses": losses, "norms": norms, "forced": forced,
            "decoded": decoded[0].tolist()}
