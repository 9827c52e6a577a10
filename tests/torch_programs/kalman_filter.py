"""A differentiable Kalman filter whose noise covariances and dynamics are learned by
maximising the innovations' likelihood, in the style of filterpy-to-PyTorch ports and
"backprop Kalman filter" code: the process and measurement covariances parametrised by
lower-triangular factors filled through ``torch.tril_indices`` with a softplus diagonal
(``diag_embed``), the transition built by ``torch.block_diag`` of constant-velocity blocks
and a learned ``torch.kron`` coupling, the gain by ``torch.linalg.solve`` of the
innovation covariance (and, for comparison, ``cholesky_solve`` of its Cholesky factor),
the Joseph-form covariance update, the likelihood by ``MultivariateNormal(scale_tril=)``
and by hand with ``torch.logdet`` and ``torch.linalg.inv``; a Python loop over time in a
batch of sequences, an RTS smoother backward over ``reversed(range(T))``, Adam with
``ExponentialLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import MultivariateNormal


def fill_tril(params, n):
    rows, cols = torch.tril_indices(n, n)
    L = params.new_zeros(params.shape[:-1] + (n, n))
    L[..., rows, cols] = params
    diag = F.softplus(torch.diagonal(L, dim1=-2, dim2=-1)) + 1e-3
    return L - torch.diag_embed(torch.diagonal(L, dim1=-2, dim2=-1)) + torch.diag_embed(diag)


class KalmanFilter(nn.Module):
    def __init__(self, dt=0.1, axes=2):
        super().__init__()
        self.n, self.m = 2 * axes, axes
        block = torch.tensor([[1.0, dt], [0.0, 1.0]])
        self.register_buffer("F_base", torch.block_diag(*[block] * axes))
        self.register_buffer("H", torch.kron(torch.eye(axes), torch.tensor([[1.0, 0.0]])))
        self.coupling = nn.Parameter(torch.zeros(axes, axes))
        self.q_params = nn.Parameter(torch.zeros(self.n * (self.n + 1) // 2))
        self.r_params = nn.Parameter(torch.zeros(self.m * (self.m + 1) // 2))

    def transition(self):
        return self.F_base + torch.kron(self.coupling, torch.tensor([[0.0, 0.0], [0.0, 1.0]]))

    def covariances(self):
        Lq, Lr = fill_tril(self.q_params, self.n), fill_tril(self.r_params, self.m)
        return Lq @ Lq.T, Lr @ Lr.T

    def forward(self, ys):
        B, T, _ = ys.shape
        Fm = self.transition()
        Q, R = self.covariances()
        x = ys.new_zeros(B, self.n)
        P = torch.eye(self.n).expand(B, self.n, self.n) * 2.0
        eye = torch.eye(self.n)
        nll, nll_by_hand = 0.0, 0.0
        means, covs, preds = [], [], []
        for t in range(T):
            x_pred = x @ Fm.T
            P_pred = Fm @ P @ Fm.T + Q
            innov = ys[:, t] - x_pred @ self.H.T
            S = self.H @ P_pred @ self.H.T + R
            S = 0.5 * (S + S.transpose(-1, -2))
            K = torch.linalg.solve(S, self.H @ P_pred).transpose(-1, -2)
            chol = torch.linalg.cholesky(S)
            K_chol = torch.cholesky_solve(self.H @ P_pred, chol).transpose(-1, -2)
            nll = nll - MultivariateNormal(torch.zeros_like(innov), scale_tril=chol).log_prob(innov)
            maha = (innov.unsqueeze(1) @ torch.linalg.inv(S) @ innov.unsqueeze(-1)).squeeze()
            nll_by_hand = nll_by_hand + 0.5 * (maha + torch.logdet(S) + self.m * np.log(2 * np.pi))
            x = x_pred + (K @ innov.unsqueeze(-1)).squeeze(-1)
            IKH = eye - K_chol @ self.H
            P = IKH @ P_pred @ IKH.transpose(-1, -2) + K @ R @ K.transpose(-1, -2)
            means.append(x)
            covs.append(P)
            preds.append((x_pred, P_pred))
        return nll.mean() / T, nll_by_hand.mean() / T, means, covs, preds

    def smooth(self, means, covs, preds):
        Fm = self.transition()
        xs, Ps = means[-1], covs[-1]
        smoothed = [xs]
        for t in reversed(range(len(means) - 1)):
            x_pred, P_pred = preds[t + 1]
            G = covs[t] @ Fm.T @ torch.linalg.inv(P_pred)
            xs = means[t] + (G @ (xs - x_pred).unsqueeze(-1)).squeeze(-1)
            Ps = covs[t] + G @ (Ps - P_pred) @ G.transpose(-1, -2)
            smoothed.append(xs)
        return torch.stack(smoothed[::-1], dim=1), Ps


def simulate(rng, batch, T, dt=0.1):
    F1 = np.array([[1.0, dt], [0.0, 1.0]])
    Fm = np.kron(np.eye(2), F1)
    Fm[3, 1] = 0.05
    x = rng.normal(0, 1, (batch, 4))
    ys, xs = [], []
    for _ in range(T):
        x = x @ Fm.T + rng.normal(0, [0.02, 0.2, 0.02, 0.2], (batch, 4))
        xs.append(x)
        ys.append(x[:, [0, 2]] + rng.normal(0, 0.3, (batch, 2)))
    return (torch.from_numpy(np.stack(ys, 1).astype(np.float32)),
            torch.from_numpy(np.stack(xs, 1).astype(np.float32)))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = KalmanFilter()
    with torch.no_grad():
        model.q_params.copy_(torch.from_numpy(rng.normal(-1, 0.2, model.q_params.shape)
                                              .astype(np.float32)))
        model.r_params.copy_(torch.from_numpy(rng.normal(0, 0.2, model.r_params.shape)
                                              .astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    net = torch.compile(model) if compile == "model" else model

    def train_step(ys):
        optimizer.zero_grad()
        nll, nll_by_hand, means, covs, preds = net(ys)
        (nll + 0.0 * nll_by_hand).backward()
        optimizer.step()
        return nll.detach(), nll_by_hand.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        ys, _ = simulate(rng, 3, 6)
        nll, nll_by_hand = train_step(ys)
        scheduler.step()
        log.append([nll.item(), nll_by_hand.item()])
    ys, xs = simulate(rng, 2, 7)
    with torch.no_grad():
        _, _, means, covs, preds = net(ys)
        smoothed, P0 = model.smooth(means, covs, preds)
    Q, R = model.covariances()
    return {"log": log, "smoothed": smoothed[:, :, 0].flatten().tolist(),
            "smooth_err": (smoothed - xs).pow(2).mean().item(), "P0": P0[0].diagonal().tolist(),
            "Q": Q.diagonal().tolist(), "R": R.flatten().tolist(),
            "coupling": model.coupling.detach().flatten().tolist()}
