"""A tiny NeRF, written the way the PyTorch NeRF ports are: positional encoding
``torch.cat([fn(2. ** i * x) for i in range(L) for fn in (torch.sin, torch.cos)], -1)``,
an MLP with a skip connection that concatenates the encoded input back in, stratified
samples along each ray from ``torch.linspace`` expanded to ``[N_rays, N_samples]`` and
perturbed between midpoints, volume rendering (``raw2outputs``: distances with a ``1e10``
last interval, ``torch.norm(rays_d[..., None, :], dim=-1)``, ``alpha = 1 - exp(-relu(sigma)
* dists)``, transmittance by an exclusive ``torch.cumprod`` made with ``torch.roll`` and
``cumprod[..., 0] = 1.``), hierarchical sampling (``sample_pdf``: a CDF from the coarse
weights, ``torch.searchsorted(cdf, u, right=True)``, ``torch.stack([below, above], -1)``,
``torch.gather`` from the expanded CDF and bins, ``torch.where(denom < 1e-5, ...)``) with
the fine samples ``detach``-ed and merged by ``torch.sort``, coarse and fine networks in
one Adam, PSNR as ``-10. * torch.log10(mse)``, and the learning rate decayed by hand in
``param_group['lr']``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def positional_encoding(x, num_freqs):
    return torch.cat([x] + [fn(2.0 ** i * x) for i in range(num_freqs)
                            for fn in (torch.sin, torch.cos)], dim=-1)


class NeRF(nn.Module):
    def __init__(self, d_input=3, n_freqs=3, n_layers=4, d_filter=32, skip=(2,)):
        super().__init__()
        self.n_freqs, self.skip = n_freqs, skip
        d_in = d_input * (1 + 2 * n_freqs)
        self.layers = nn.ModuleList(
            [nn.Linear(d_in, d_filter)]
            + [nn.Linear(d_filter + d_in, d_filter) if i in skip else
               nn.Linear(d_filter, d_filter) for i in range(1, n_layers)])
        self.output = nn.Linear(d_filter, 4)

    def forward(self, x):
        x = positional_encoding(x, self.n_freqs)
        x_input = x
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x))
            if i + 1 in self.skip:
                x = torch.cat([x, x_input], dim=-1)
        return self.output(x)


def cumprod_exclusive(tensor):
    cumprod = torch.cumprod(tensor, -1)
    cumprod = torch.roll(cumprod, 1, -1)
    cumprod[..., 0] = 1.0
    return cumprod


def raw2outputs(raw, z_vals, rays_d):
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, 1e10 * torch.ones_like(dists[..., :1])], dim=-1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * dists)
    weights = alpha * cumprod_exclusive(1.0 - alpha + 1e-10)
    rgb = torch.sigmoid(raw[..., :3])
    rgb_map = torch.sum(weights[..., None] * rgb, dim=-2)
    depth_map = torch.sum(weights * z_vals, dim=-1)
    acc_map = torch.sum(weights, dim=-1)
    rgb_map = rgb_map + (1.0 - acc_map[..., None])   # white background
    return rgb_map, depth_map, acc_map, weights


def sample_pdf(bins, weights, u):
    pdf = (weights + 1e-5) / torch.sum(weights + 1e-5, -1, keepdim=True)
    cdf = torch.cumsum(pdf, dim=-1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], dim=-1)
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.clamp(inds - 1, min=0)
    above = torch.clamp(inds, max=cdf.shape[-1] - 1)
    inds_g = torch.stack([below, above], dim=-1)
    matched_shape = list(inds_g.shape[:-1]) + [cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(-2).expand(matched_shape), dim=-1, index=inds_g)
    bins_g = torch.gather(bins.unsqueeze(-2).expand(matched_shape), dim=-1, index=inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


def render_rays(coarse, fine, rays_o, rays_d, t_rand, u, near=2.0, far=6.0):
    n_samples = t_rand.shape[-1]
    t_vals = torch.linspace(0.0, 1.0, n_samples)
    z_vals = (near * (1.0 - t_vals) + far * t_vals).expand([rays_o.shape[0], n_samples])
    mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    upper = torch.cat([mids, z_vals[..., -1:]], -1)
    lower = torch.cat([z_vals[..., :1], mids], -1)
    z_vals = lower + (upper - lower) * t_rand
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    rgb_coarse, _, _, weights = raw2outputs(coarse(pts), z_vals, rays_d)
    z_vals_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    z_samples = sample_pdf(z_vals_mid, weights[..., 1:-1], u).detach()
    z_vals_combined, _ = torch.sort(torch.cat([z_vals, z_samples], dim=-1), dim=-1)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals_combined[..., :, None]
    rgb_map, depth_map, acc_map, _ = raw2outputs(fine(pts), z_vals_combined, rays_d)
    return rgb_coarse, rgb_map, depth_map


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor(rng.normal(0, 0.35, tuple(v.shape)).astype(np.float32))
        for k, v in model.state_dict().items()})


def make_rays(rng, n):
    """Rays from a ring of cameras at the origin's height, looking roughly inwards; the
    target colour is a smooth function of the ray (a stand-in for a photo's pixels)."""
    angle = rng.uniform(0, 2 * np.pi, n)
    rays_o = np.stack([4 * np.cos(angle), 4 * np.sin(angle), rng.uniform(-0.5, 0.5, n)], -1)
    rays_d = -rays_o / 4 + rng.normal(0, 0.1, (n, 3))
    target = 0.5 + 0.4 * np.stack([np.cos(angle), np.sin(angle), np.cos(2 * angle)], -1)
    f = np.float32
    return (torch.tensor(rays_o.astype(f)), torch.tensor(rays_d.astype(f)),
            torch.tensor(target.astype(f)))


def main(steps=10, compile=False, seed=0, n_rays=16, n_samples=8, n_importance=8):
    coarse, fine = NeRF(), NeRF()
    init_weights(coarse, seed)
    init_weights(fine, seed + 1)
    lrate, decay_rate, decay_steps = 5e-3, 0.1, 20
    optimizer = torch.optim.Adam(list(coarse.parameters()) + list(fine.parameters()),
                                 lr=lrate, betas=(0.9, 0.999))
    rng = np.random.default_rng(seed + 2)

    def train_step(rays_o, rays_d, target, t_rand, u):
        rgb_coarse, rgb, _ = render_rays(coarse, fine, rays_o, rays_d, t_rand, u)
        optimizer.zero_grad()
        img_loss = F.mse_loss(rgb, target)
        loss = img_loss + F.mse_loss(rgb_coarse, target)
        psnr = -10.0 * torch.log10(img_loss)
        loss.backward()
        optimizer.step()
        return loss, psnr

    if compile == "model":
        coarse, fine = torch.compile(coarse), torch.compile(fine)
    elif compile:
        train_step = torch.compile(train_step)
    losses, psnrs = [], []
    for global_step in range(steps):
        rays_o, rays_d, target = make_rays(rng, n_rays)
        t_rand = torch.tensor(rng.uniform(size=(n_rays, n_samples)).astype(np.float32))
        u = torch.tensor(rng.uniform(size=(n_rays, n_importance)).astype(np.float32))
        loss, psnr = train_step(rays_o, rays_d, target, t_rand, u)
        losses.append(loss.item())
        psnrs.append(psnr.item())
        new_lrate = lrate * (decay_rate ** (global_step / decay_steps))
        for param_group in optimizer.param_groups:
            param_group["lr"] = new_lrate
    rays_o, rays_d, _ = make_rays(rng, 4)
    with torch.no_grad():
        u = torch.linspace(0.0, 1.0, n_importance).expand(4, n_importance)
        _, rgb, depth = render_rays(coarse, fine, rays_o, rays_d,
                                    torch.full((4, n_samples), 0.5), u)
    return {"losses": losses, "psnr": psnrs, "rgb": rgb.flatten().tolist(),
            "depth": depth.tolist()}
