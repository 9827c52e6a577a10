"""Pipeline parallelism, distributed checkpoints and a two-host run: scripts in
``tests/distributed/`` run under ``mpiexec -n 2`` (helpers of tests/test_distributed.py).

Skipped, with the reason, where mpi4py (the ``distributed`` extra) is not installed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from test_distributed import HERE, ROOT, mpiexec, needs_mpi, ok_lines

import dualgraph as dg


@needs_mpi
def test_pipeline_equals_the_unsplit_model_gpipe_and_1f1b_eager_and_compiled():
    lines = ok_lines(mpiexec("pipeline.py"))
    for check in ("ScheduleGPipe eager", "ScheduleGPipe compiled", "Schedule1F1B eager",
                  "Schedule1F1B compiled"):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


def test_split_module_and_schedule_orders(monkeypatch):
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.distributed.pipeline import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                                split_module)
    from dualgraph.ops import collective
    monkeypatch.setattr(collective.STATE, "comm", Communicator(None, 5.0))
    layers = [dg.nn.Linear(2, 2) for _ in range(5)]
    model = dg.nn.Sequential(*layers)
    parts = [list(split_module(model, 3, s)) for s in range(3)]
    assert parts == [layers[:2], layers[2:4], layers[4:]]
    assert split_module(layers[:3], 3, 1) is layers[1]
    with pytest.raises(ValueError, match="can't be cut into 6 stages"):
        split_module(model, 6, 0)
    stage = PipelineStage(model, 0, 1)
    stage.num_stages, stage.is_last = 2, False   # stage 0 of 2: the order only
    assert Schedule1F1B(stage, 3).order() == [("F", 0), ("F", 1), ("B", 0), ("F", 2),
                                              ("B", 1), ("B", 2)]
    assert ScheduleGPipe(stage, 2).order() == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    with pytest.raises(ValueError, match="one stage per rank"):
        PipelineStage(model, 1, 2)


@needs_mpi
def test_resume_from_a_checkpoint_continues_the_same_loss_curve(tmp_path):
    """6 steps in one go == 3 steps, a checkpoint, and 3 more in new processes (other
    seeds), bit for bit, on both ranks: model, Adam, scaler, sampler epoch and position,
    and the dualgraph, NumPy and Python random streams all come back."""
    ckpt = tmp_path / "ckpt"
    for run in ("first", "resume"):
        result = mpiexec("checkpoint.py", run, ckpt, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    for rank in range(2):
        def read(run):
            return json.loads((tmp_path / f"{run}-{rank}.json").read_text())
        full, first, resumed = read("full"), read("first"), read("resumed")
        assert len(full) == 6 and first == full[:3], (first, full)
        assert resumed == full[3:], (resumed, full)


class Weights:
    """A model-like state: one big tensor filled with one number."""

    def __init__(self, value, n=1):
        self.w = dg.full((n,), float(value))

    def state_dict(self):
        return {"w": self.w}

    def load_state_dict(self, state):
        self.w = state["w"]


def _temporary_files(directory):
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_checkpoint_writer_killed_at_each_step_leaves_the_previous_one(tmp_path):
    """A forked writer kills itself (SIGKILL) just before its k-th fsync or rename: until
    the manifest's rename the previous checkpoint loads, from then on the new one; either
    way loading leaves no temporary file."""
    from dualgraph.distributed.checkpoint import load_checkpoint, save_checkpoint
    save_checkpoint(tmp_path, model=Weights(1), step=1)
    outcomes = []
    for k in range(1, 8):
        pid = os.fork()
        if pid == 0:   # the writer: never returns into pytest
            try:
                calls = [0]

                def dying(real):
                    def call(*args, **kwargs):
                        calls[0] += 1
                        if calls[0] == k:
                            os.kill(os.getpid(), signal.SIGKILL)
                        return real(*args, **kwargs)
                    return call
                os.fsync, os.replace = dying(os.fsync), dying(os.replace)
                save_checkpoint(tmp_path, model=Weights(2), step=2)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status)
        model = Weights(0)
        step = load_checkpoint(tmp_path, model=model)["step"]
        assert model.w.numpy().tolist() == [float(step)]
        assert _temporary_files(tmp_path) == []
        outcomes.append((killed, step))
        save_checkpoint(tmp_path, model=Weights(1), step=1)   # the previous one, again
    # fsync+rename of the data, fsync of the directory, then of the manifest; the 7th
    # call never comes
    assert outcomes == [(True, 1)] * 5 + [(True, 2), (False, 2)], outcomes


def test_a_checkpoint_writer_killed_mid_write_from_outside(tmp_path):
    """A separate process writes 16 MB checkpoints in a loop; it is killed (os.kill,
    SIGKILL) while a temporary file is being written. The last committed checkpoint
    loads, its checksum verified, and no temporary file is left."""
    script = ("import sys, itertools, dualgraph as dg\n"
              "from dualgraph.distributed.checkpoint import save_checkpoint\n"
              "from test_distributed_pipeline import Weights\n"
              "for i in itertools.count(1):\n"
              "    save_checkpoint(sys.argv[1], model=Weights(i, 4_000_000), step=i)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
    writer = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and writer.poll() is None:
            manifest = tmp_path / "manifest.json"
            if manifest.exists() and _temporary_files(tmp_path) and \
                    json.loads(manifest.read_text())["step"] >= 2:
                break
            time.sleep(0.001)
        assert writer.poll() is None, "the writer stopped by itself"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    from dualgraph.distributed.checkpoint import load_checkpoint
    model = Weights(0)
    step = load_checkpoint(tmp_path, model=model)["step"]
    assert step >= 2 and np.all(model.w.numpy() == step)
    assert _temporary_files(tmp_path) == []


def test_loading_verifies_the_checksum_and_the_world_size(tmp_path):
    from dualgraph.distributed.checkpoint import (CheckpointError, load_checkpoint,
                                                  save_checkpoint)
    with pytest.raises(CheckpointError, match="no checkpoint here"):
        load_checkpoint(tmp_path)
    save_checkpoint(tmp_path, model=Weights(3, 10), step=3)
    name = next(p for p in tmp_path.iterdir() if p.suffix == ".safetensors")
    data = bytearray(name.read_bytes())
    data[-1] ^= 1
    name.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256 is not the manifest's"):
        load_checkpoint(tmp_path, model=Weights(0))
