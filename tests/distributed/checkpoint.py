"""Run by tests/test_distributed_pipeline.py: ``mpiexec -n 2 python checkpoint.py first DIR OUT``
trains 6 steps (data parallel, Adam, dropout, a shuffling DistributedSampler whose epoch
ends after 5 steps, NumPy and Python random noise in the batches, a scaler-like state),
then starts again from the same seeds, trains 3 steps and checkpoints into DIR;
``... resume DIR`` (new processes, other seeds) loads the checkpoint and trains the 3 steps
left. Each rank writes ``OUT/<run>-<rank>.json``, its [(loss, scale), ...] per step: the
first 3 and the resumed 3 must be the 6 exactly."""
import json
import random
import sys

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed.checkpoint import load_checkpoint, save_checkpoint
from dualgraph.nn.parallel import DistributedDataParallel as DDP
from dualgraph.utils.data import DistributedSampler

dist.init_process_group("mpi")
RANK = dist.get_rank()
MODE, DIR, OUT = sys.argv[1:4]
TOTAL, SAVE_AT, BATCH = 6, 3, 4
data = np.random.default_rng(0)
X = data.standard_normal((40, 12)).astype(np.float32)
Y = data.integers(0, 5, 40)


class Scaler:
    """Stands for a GradScaler: a state that changes every step."""
    def __init__(self):
        self.scale = 2.0 ** 16

    def update(self):
        self.scale *= 0.75

    def state_dict(self):
        return {"scale": self.scale}

    def load_state_dict(self, state):
        self.scale = state["scale"]


def setup(seed):
    dg.manual_seed(seed)
    net = dg.nn.Sequential(dg.nn.Linear(12, 32), dg.nn.Dropout(0.3), dg.nn.Tanh(),
                           dg.nn.Linear(32, 5))
    model = DDP(net)
    dg.manual_seed(seed + 100 + RANK)   # each rank its own dropout stream
    np.random.seed(seed + RANK)
    random.seed(seed + RANK)
    opt = dg.optim.Adam(model.parameters(), lr=1e-2)
    return model, opt, DistributedSampler(list(range(40)), seed=seed), Scaler()


def train(model, opt, sampler, scaler, step, stop, position):
    """Steps ``step`` .. ``stop``; returns (losses, position in the epoch)."""
    losses = []
    while True:
        order = list(sampler)
        for b in range(position, len(order) // BATCH):
            if step == stop:
                return losses, b
            idx = order[b * BATCH:(b + 1) * BATCH]
            noise = np.random.standard_normal((BATCH, 12)).astype(np.float32) * 0.1
            x = dg.tensor(X[idx] + noise) * (1 + random.random())
            opt.zero_grad()
            loss = dg.nn.functional.cross_entropy(model(x), dg.tensor(Y[idx]))
            loss.backward()
            opt.step()
            scaler.update()
            losses.append((loss.item(), scaler.scale))
            step += 1
        sampler.set_epoch(sampler.epoch + 1)
        position = 0


def report(run, losses):
    with open(f"{OUT}/{run}-{RANK}.json", "w") as f:
        json.dump(losses, f)


if MODE == "first":
    model, opt, sampler, scaler = setup(0)
    full, _ = train(model, opt, sampler, scaler, 0, TOTAL, 0)
    report("full", full)
    model, opt, sampler, scaler = setup(0)
    first, position = train(model, opt, sampler, scaler, 0, SAVE_AT, 0)
    save_checkpoint(DIR, model=model, optimizer=opt, scaler=scaler, sampler=sampler,
                    position=position, step=SAVE_AT)
    report("first", first)
else:
    model, opt, sampler, scaler = setup(7)   # other seeds: everything must come from DIR
    info = load_checkpoint(DIR, model=model, optimizer=opt, scaler=scaler, sampler=sampler)
    rest, _ = train(model, opt, sampler, scaler, info["step"], TOTAL, info["position"])
    report("resumed", rest)
dist.destroy_process_group()
