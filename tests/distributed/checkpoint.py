"""Run by tests/test_distributed_pipeline.py: ``mpiexec -n 2 python checkpoint.py first DIR
OUT KIND...`` trains each KIND 6 steps (Adam, a shuffling DistributedSampler whose epoch
ends after 5 steps, NumPy and Python random noise in the batches, a scaler-like state),
then starts again from the same seeds, trains 3 steps and checkpoints into DIR/KIND;
``... resume DIR OUT KIND...`` (new processes, other seeds) loads each checkpoint and trains
the 3 steps left. Each rank writes ``OUT/<KIND>-<run>-<rank>.json``, its [(loss or None,
sum of its parameters, scale), ...] per step: the first 3 and the resumed 3 must be the 6
exactly. The kinds:

- ``ddp``: DistributedDataParallel with dropout (every rank's random streams matter);
- ``zero``: DDP with ZeroRedundancyOptimizer (each rank's shard of Adam's moments);
- ``pipeline`` (4 ranks): 2 stages x 2 replicas, Schedule1F1B, each stage's DDP over the
  ranks that hold it (the stages' parameters differ: each rank's shard holds its own).

``... killed DIR OUT KIND...`` (between the two) starts a save in which rank 1 is killed
(SIGKILL) with its shard's temporary file written: the job ends, and ``resume`` must still
load the checkpoint of ``first`` and remove the temporary file.

With ``ddp``, ``first`` also makes a save fail on rank 1 only (an ``extra`` ``dg.save``
can't store): every rank raises, naming rank 1, and the directory keeps the previous
checkpoint's files only; ``resume`` also loads into a job whose rank 1 has another model:
every rank raises, naming rank 1 and the first shape that differs."""
import json
import os
import random
import signal
import sys

import numpy as np

import dualgraph as dg
import dualgraph.distributed as dist
from dualgraph.distributed.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from dualgraph.distributed.optim import ZeroRedundancyOptimizer
from dualgraph.distributed.pipeline import PipelineStage, Schedule1F1B, split_module
from dualgraph.nn.parallel import DistributedDataParallel as DDP
from dualgraph.utils.data import DistributedSampler

dist.init_process_group("mpi")
RANK, SIZE = dist.get_rank(), dist.get_world_size()
MODE, DIR, OUT, KINDS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
TOTAL, SAVE_AT, BATCH = 6, 3, 4
data = np.random.default_rng(0)
X = data.standard_normal((40, 12)).astype(np.float32)
Y = data.integers(0, 5, 40)
if "pipeline" in KINDS:   # global rank 2 * replica + stage (every rank makes every group)
    assert SIZE == 4, "checkpoint.py ... pipeline runs on 4 ranks (2 stages x 2 replicas)"
    PIPES = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    REPLICAS = [dist.new_group([0, 2]), dist.new_group([1, 3])]


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


def net(width=32):
    return dg.nn.Sequential(dg.nn.Linear(12, width), dg.nn.Dropout(0.3), dg.nn.Tanh(),
                            dg.nn.Linear(width, 5))


def setup(kind, seed, width=32):
    """(model to checkpoint, optimiser, sampler, scaler, step(x, y) -> loss or None)."""
    dg.manual_seed(seed)
    replica, replicas = RANK, SIZE
    if kind == "pipeline":
        replica, stage_index = divmod(RANK, 2)
        replicas = 2
        model = DDP(split_module(net(width), group=PIPES[replica]),
                    process_group=REPLICAS[stage_index])
        stage = PipelineStage(model, stage_index, 2, group=PIPES[replica])
        schedule = Schedule1F1B(stage, n_microbatches=2,
                                loss_fn=dg.nn.functional.cross_entropy)

        def forward_backward(x, y):
            return schedule.step(x, target=y)
    else:
        model = DDP(net(width))

        def forward_backward(x, y):
            loss = dg.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss
    dg.manual_seed(seed + 100 + RANK)   # each rank its own dropout stream
    np.random.seed(seed + RANK)
    random.seed(seed + RANK)
    if kind == "zero":
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=dg.optim.Adam,
                                      lr=1e-2)
    else:
        opt = dg.optim.Adam(model.parameters(), lr=1e-2)
    sampler = DistributedSampler(list(range(40)), num_replicas=replicas, rank=replica,
                                 seed=seed)
    return model, opt, sampler, Scaler(), forward_backward


def train(model, opt, sampler, scaler, forward_backward, step, stop, position):
    """Steps ``step`` .. ``stop``; returns (records, position in the epoch)."""
    records = []
    while True:
        order = list(sampler)
        for b in range(position, len(order) // BATCH):
            if step == stop:
                return records, b
            idx = order[b * BATCH:(b + 1) * BATCH]
            noise = np.random.standard_normal((BATCH, 12)).astype(np.float32) * 0.1
            x = dg.tensor(X[idx] + noise) * (1 + random.random())
            opt.zero_grad()
            loss = forward_backward(x, dg.tensor(Y[idx]))
            opt.step()
            scaler.update()
            total = float(sum(p.detach().numpy().astype(np.float64).sum()
                              for p in model.parameters()))
            records.append((None if loss is None else loss.item(), total, scaler.scale))
            step += 1
        sampler.set_epoch(sampler.epoch + 1)
        position = 0


def report(kind, run, records):
    with open(f"{OUT}/{kind}-{run}-{RANK}.json", "w") as f:
        json.dump(records, f)


def expect_error(call, *words):
    try:
        call()
    except CheckpointError as e:
        assert all(w in str(e) for w in words), str(e)
        return
    raise AssertionError(f"no CheckpointError on rank {RANK}")


for kind in KINDS:
    where = os.path.join(DIR, kind)
    if MODE == "killed":   # rank 1 dies (SIGKILL) with its shard's temporary file written
        model, opt, sampler, scaler, step = setup(kind, 0)
        if RANK == 1:
            os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        save_checkpoint(where, model=model, optimizer=opt, step=99)
        raise AssertionError("the job outlived its killed rank")
    if MODE == "first":
        run = setup(kind, 0)
        report(kind, "full", train(*run, 0, TOTAL, 0)[0])
        model, opt, sampler, scaler, step = setup(kind, 0)
        first, position = train(model, opt, sampler, scaler, step, 0, SAVE_AT, 0)
        save_checkpoint(where, model=model, optimizer=opt, scaler=scaler, sampler=sampler,
                        position=position, step=SAVE_AT)
        report(kind, "first", first)
        if kind == "ddp":   # a save that fails on rank 1 leaves the previous checkpoint
            files = sorted(os.listdir(where))
            dist.barrier()   # (every rank has listed them before rank 0 writes again)
            expect_error(lambda: save_checkpoint(
                where, model=model, step=99, extra=object() if RANK == 1 else None),
                "rank 1:", "previous checkpoint is unchanged")
            dist.barrier()
            assert sorted(os.listdir(where)) == files, (os.listdir(where), files)
    else:
        model, opt, sampler, scaler, step = setup(kind, 7)   # everything must come from DIR
        info = load_checkpoint(where, model=model, optimizer=opt, scaler=scaler,
                               sampler=sampler)
        rest, _ = train(model, opt, sampler, scaler, step, info["step"], TOTAL,
                        info["position"])
        report(kind, "resumed", rest)
        dist.barrier()   # (rank 0 removed the temporary files of killed writers)
        assert not [n for n in os.listdir(where) if n.endswith(".tmp")], os.listdir(where)
        if kind == "ddp":   # rank 1 built another model: every rank says so
            other = dg.nn.Module()   # (DDP's state keys, no broadcast of unequal shapes)
            other.module = net(33 if RANK == 1 else 32)
            expect_error(lambda: load_checkpoint(where, model=other), "rank 1:",
                         "model state (name, shape) differ", "[32, 12]", "[33, 12]")
dist.destroy_process_group()
