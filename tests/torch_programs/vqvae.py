"""A small VQ-VAE on 8x8 images, written the way VQ-VAE reference programs are: a conv
encoder, a vector quantiser that flattens ``permute(0, 2, 3, 1).contiguous()`` latents,
finds each one's nearest code with ``torch.cdist`` / ``argmin`` (and, as the other common
spelling, the expanded squared distance ``x**2 + e**2 - 2 x @ e.T``), one-hot encodings
made with ``scatter_(1, indices, 1)`` on a ``torch.zeros`` buffer, the straight-through
estimator ``inputs + (quantized - inputs).detach()``, the codebook and commitment losses
with ``F.mse_loss(quantized.detach(), inputs)``, the codebook perplexity from the mean of
the encodings, an exponential moving average codebook update under ``torch.no_grad()``
written in place into buffers (``mul_``/``add_``, Laplace smoothing, ``copy_``), a
transposed-conv decoder, and ``clip_grad_norm_``. The EMA update runs outside the compiled
step, the way a training script calls it after ``optimizer.step()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings=16, embedding_dim=4, commitment_cost=0.25, decay=0.9,
                 epsilon=1e-5):
        super().__init__()
        self._num_embeddings, self._embedding_dim = num_embeddings, embedding_dim
        self._commitment_cost, self._decay, self._epsilon = commitment_cost, decay, epsilon
        self.register_buffer("_embedding", torch.zeros(num_embeddings, embedding_dim))
        self.register_buffer("_ema_cluster_size", torch.zeros(num_embeddings))
        self.register_buffer("_ema_w", torch.zeros(num_embeddings, embedding_dim))

    def forward(self, inputs):
        inputs = inputs.permute(0, 2, 3, 1).contiguous()
        input_shape = inputs.shape
        flat_input = inputs.view(-1, self._embedding_dim)
        distances = (torch.sum(flat_input ** 2, dim=1, keepdim=True)
                     + torch.sum(self._embedding ** 2, dim=1)
                     - 2 * torch.matmul(flat_input, self._embedding.t()))
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        cdist_indices = torch.cdist(flat_input, self._embedding).argmin(dim=1)
        encodings = torch.zeros(encoding_indices.shape[0], self._num_embeddings)
        encodings.scatter_(1, encoding_indices, 1)
        quantized = torch.matmul(encodings, self._embedding).view(input_shape)
        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        loss = self._commitment_cost * e_latent_loss
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        agree = (cdist_indices == encoding_indices[:, 0]).float().mean()
        return (loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity,
                encodings.detach(), flat_input.detach(), agree)

    @torch.no_grad()
    def ema_update(self, encodings, flat_input):
        self._ema_cluster_size.mul_(self._decay).add_(torch.sum(encodings, 0),
                                                      alpha=1 - self._decay)
        n = torch.sum(self._ema_cluster_size)
        self._ema_cluster_size.copy_((self._ema_cluster_size + self._epsilon)
                                     / (n + self._num_embeddings * self._epsilon) * n)
        dw = torch.matmul(encodings.t(), flat_input)
        self._ema_w.mul_(self._decay).add_(dw, alpha=1 - self._decay)
        self._embedding.copy_(self._ema_w / self._ema_cluster_size.unsqueeze(1))


class VQVAE(nn.Module):
    def __init__(self, hidden=8, embedding_dim=4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, hidden, 4, stride=2, padding=1), nn.ReLU(),
                                     nn.Conv2d(hidden, embedding_dim, 3, padding=1))
        self.vq = VectorQuantizerEMA(embedding_dim=embedding_dim)
        self.decoder = nn.Sequential(nn.Conv2d(embedding_dim, hidden, 3, padding=1), nn.ReLU(),
                                     nn.ConvTranspose2d(hidden, 1, 4, stride=2, padding=1))

    def forward(self, x):
        z = self.encoder(x)
        loss, quantized, perplexity, encodings, flat, agree = self.vq(z)
        return loss, self.decoder(quantized), perplexity, encodings, flat, agree


def init(model, seed):
    rng = np.random.default_rng(seed)
    state = {k: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
             for k, v in model.state_dict().items()}
    state["vq._ema_cluster_size"] = torch.ones(16)
    state["vq._ema_w"] = state["vq._embedding"].clone()
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0):
    model = VQVAE()
    init(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, amsgrad=False)
    rng = np.random.default_rng(seed + 1)
    grid = np.linspace(-1, 1, 8)
    data = np.stack([np.sin(3 * (grid[:, None] * np.cos(a) + grid[None, :] * np.sin(a)))
                     for a in rng.uniform(0, np.pi, 24)])[:, None].astype(np.float32)

    def train_step(x):
        optimizer.zero_grad()
        vq_loss, recon, perplexity, encodings, flat, agree = model(x)
        recon_error = F.mse_loss(recon, x)
        loss = recon_error + vq_loss
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return recon_error, perplexity, encodings, flat, agree

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    errors, perplexities, agreement = [], [], []
    for step in range(steps):
        x = torch.tensor(data[rng.choice(24, 6, replace=False)])
        recon_error, perplexity, encodings, flat, agree = train_step(x)
        model.vq.ema_update(encodings, flat)
        errors.append(recon_error.item())
        perplexities.append(perplexity.item())
        agreement.append(agree.item())
    return {"recon_errors": errors, "perplexity": perplexities, "agreement": agreement,
            "codebook": model.vq._embedding[:2].flatten().tolist()}
