"""Neural ODEs as torchdiffeq's examples write them, with a fixed-grid solver written out
(torchdiffeq's ``rk4`` method, 3/8 rule): ``ode_demo.py``'s spiral fit (an ``ODEFunc`` whose
``nfe`` counter the forward increments, ``torch.linspace`` time grids, random sub-sequences
``np.random.choice`` picks, ``torch.mean(torch.abs(pred_y - batch_y))``, RMSprop) and a
continuous normalizing flow in FFJORD's exact-trace form (``cnf.py``: a hypernetwork
``HyperNetwork(t)`` giving the weights of a width-w layer, ``dz_dt = h(z)``, and
``dlogp_dt = -trace(dh/dz)`` by one ``torch.autograd.grad(f[:, i].sum(), z,
create_graph=True)`` per dimension), trained with Adam by maximum likelihood on two moons;
``torch.distributions.MultivariateNormal`` as the base density."""
import numpy as np
import torch
import torch.nn as nn


def rk4_step(func, t0, dt, y0):
    """torchdiffeq's ``rk4_alt_step_func`` (the 3/8 rule) for a tuple state."""
    def add(y, k, c):
        return tuple(a + c * b for a, b in zip(y, k))
    k1 = func(t0, y0)
    k2 = func(t0 + dt / 3, add(y0, k1, dt / 3))
    k3 = func(t0 + dt * 2 / 3, tuple(a + dt * (b - c / 3) for a, b, c in zip(y0, k2, k1)))
    k4 = func(t0 + dt, tuple(a + dt * (b - c + d) for a, b, c, d in zip(y0, k1, k2, k3)))
    return tuple((a + b * 3 + c * 3 + d) * (dt * 0.125) for a, b, c, d in zip(k1, k2, k3, k4))


def odeint(func, y0, t):
    """Solutions at every time of ``t`` (a 1-D tensor), one RK4 step between grid points."""
    tensor_input = isinstance(y0, torch.Tensor)
    state = (y0,) if tensor_input else tuple(y0)
    f = (lambda t, y: (func(t, y[0]),)) if tensor_input else func
    solution = [state]
    for t0, t1 in zip(t[:-1], t[1:]):
        dy = rk4_step(f, t0, t1 - t0, state)
        state = tuple(a + b for a, b in zip(state, dy))
        solution.append(state)
    out = tuple(torch.stack([s[i] for s in solution]) for i in range(len(state)))
    return out[0] if tensor_input else out


class ODEFunc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 50), nn.Tanh(), nn.Linear(50, 2))
        self.nfe = 0

    def forward(self, t, y):
        self.nfe += 1
        return self.net(y ** 3)


class HyperNetwork(nn.Module):
    def __init__(self, in_out_dim, hidden_dim, width):
        super().__init__()
        blocksize = width * in_out_dim
        self.fc1 = nn.Linear(1, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.fc3 = nn.Linear(hidden_dim, 3 * blocksize + width)
        self.in_out_dim, self.hidden_dim, self.width = in_out_dim, hidden_dim, width
        self.blocksize = blocksize

    def forward(self, t):
        params = t.reshape(1, 1)
        params = torch.tanh(self.fc1(params))
        params = torch.tanh(self.fc2(params))
        params = self.fc3(params)
        params = params.reshape(-1)
        W = params[:self.blocksize].reshape(self.width, self.in_out_dim, 1)
        U = params[self.blocksize:2 * self.blocksize].reshape(self.width, 1, self.in_out_dim)
        G = params[2 * self.blocksize:3 * self.blocksize].reshape(self.width, 1, self.in_out_dim)
        U = U * torch.sigmoid(G)
        B = params[3 * self.blocksize:].reshape(self.width, 1, 1)
        return [W, B, U]


def trace_df_dz(f, z):
    sum_diag = 0.
    for i in range(z.shape[1]):
        sum_diag += torch.autograd.grad(f[:, i].sum(), z, create_graph=True)[0].contiguous()[:, i]
    return sum_diag.contiguous()


class CNF(nn.Module):
    def __init__(self, in_out_dim, hidden_dim, width):
        super().__init__()
        self.in_out_dim, self.hidden_dim, self.width = in_out_dim, hidden_dim, width
        self.hyper_net = HyperNetwork(in_out_dim, hidden_dim, width)

    def forward(self, t, states):
        z = states[0]
        batchsize = z.shape[0]
        with torch.set_grad_enabled(True):
            z.requires_grad_(True)
            W, B, U = self.hyper_net(t)
            Z = torch.unsqueeze(z, 0).repeat(self.width, 1, 1)
            h = torch.tanh(torch.matmul(Z, W) + B)
            dz_dt = torch.matmul(h, U).mean(0)
            dlogp_z_dt = -trace_df_dz(dz_dt, z).view(batchsize, 1)
        return (dz_dt, dlogp_z_dt)


def moons(rng, n):
    a = rng.uniform(0, np.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(a), 1 - np.cos(a))
    y = np.where(upper, np.sin(a), 0.5 - np.sin(a))
    return np.stack([x - 0.5, y - 0.25], 1) + rng.normal(0, 0.08, (n, 2))


def init_weights(module, rng, scale=1.0):
    state = module.state_dict()
    for name, v in state.items():
        fan_in = v.shape[1] if v.dim() > 1 else v.shape[0]
        state[name] = torch.tensor((scale * rng.normal(0, 1 / np.sqrt(fan_in), tuple(v.shape)))
                                   .astype(np.float32))
    module.load_state_dict(state)


def main(steps=10, compile=False, seed=0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    # -- ode_demo: recover a spiral's dynamics from sampled sub-sequences
    true_y0 = torch.tensor([[2., 0.]])
    t = torch.linspace(0., 2., 40)
    true_A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
    with torch.no_grad():
        true_y = odeint(lambda t, y: torch.mm(y ** 3, true_A), true_y0, t)
    func = ODEFunc()
    init_weights(func, rng, 0.3)
    optimizer = torch.optim.RMSprop(func.parameters(), lr=1e-3)
    batches = [np.random.default_rng(seed + 10 + i).choice(np.arange(40 - 10, dtype=np.int64),
                                                           8, replace=False)
               for i in range(steps)]

    def fit_step(batch_y0, batch_t, batch_y):
        optimizer.zero_grad()
        pred_y = odeint(func, batch_y0, batch_t)
        loss = torch.mean(torch.abs(pred_y - batch_y))
        loss.backward()
        optimizer.step()
        return loss

    # -- cnf: two moons by maximum likelihood
    cnf = CNF(in_out_dim=2, hidden_dim=16, width=8)
    init_weights(cnf, rng)
    cnf_opt = torch.optim.Adam(cnf.parameters(), lr=3e-3)
    p_z0 = torch.distributions.MultivariateNormal(loc=torch.tensor([0.0, 0.0]),
                                                  covariance_matrix=torch.tensor([[0.1, 0.0],
                                                                                  [0.0, 0.1]]))
    t0, t1 = 0, 4
    cnf_t = torch.tensor([t1, t0]).type(torch.float32)
    samples = [torch.tensor(moons(rng, 32), dtype=torch.float32) for _ in range(steps)]

    def cnf_step(x):
        cnf_opt.zero_grad()
        logp_diff_t1 = torch.zeros(x.shape[0], 1).type(torch.float32)
        z_t, logp_diff_t = odeint(cnf, (x, logp_diff_t1), torch.linspace(t1, t0, 5))
        z_t0, logp_diff_t0 = z_t[-1], logp_diff_t[-1]
        logp_x = p_z0.log_prob(z_t0) - logp_diff_t0.view(-1)
        loss = -logp_x.mean(0)
        loss.backward()
        cnf_opt.step()
        return loss

    if compile == "model":
        func = torch.compile(func)
        cnf = torch.compile(cnf)
    elif compile:
        fit_step, cnf_step = torch.compile(fit_step), torch.compile(cnf_step)
    fit_losses, cnf_losses = [], []
    for ids, x in zip(batches, samples):
        s = torch.from_numpy(ids)
        batch_y0 = true_y[s]
        batch_t = t[:10]
        batch_y = torch.stack([true_y[s + i] for i in range(10)], dim=0)
        fit_losses.append(fit_step(batch_y0, batch_t, batch_y).item())
        cnf_losses.append(cnf_step(x).item())
    with torch.no_grad():
        pred_y = odeint(func, true_y0, t)
    nfe = getattr(func, "nfe", None)
    if nfe is None:
        nfe = func._orig_mod.nfe if hasattr(func, "_orig_mod") else func.module.nfe
    return {"losses": fit_losses, "cnf_losses": cnf_losses,
            "prediction": pred_y[::8].flatten().tolist(), "nfe": [nfe]}
