"""Pipeline parallelism, distributed checkpoints and a two-host run: scripts in
``tests/distributed/`` run under ``mpiexec -n 2`` (helpers of tests/test_distributed.py).

Skipped, with the reason, where mpi4py (the ``distributed`` extra) is not installed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from test_distributed import HERE, MPIEXEC, ROOT, mpiexec, needs_mpi, ok_lines

import dualgraph as dg


@needs_mpi
def test_pipeline_equals_the_unsplit_model_gpipe_and_1f1b_eager_and_compiled():
    lines = ok_lines(mpiexec("pipeline.py"))
    for check in ("ScheduleGPipe eager", "ScheduleGPipe compiled", "Schedule1F1B eager",
                  "Schedule1F1B compiled"):
        assert sum(line.startswith(f"OK {check}") for line in lines) == 1, lines


@needs_mpi
def test_pipeline_times_data_parallel_equals_the_unsplit_model():
    """2 stages x 2 replicas on 4 ranks (oversubscribed: about 8 s on 2 cores): pipeline
    groups and DDP groups, eager and compiled stages, both schedules."""
    lines = ok_lines(mpiexec("pipeline.py", "dp", ranks=4))
    for schedule in ("ScheduleGPipe", "Schedule1F1B"):
        for mode in ("eager", "compiled"):
            assert sum(line.startswith(f"OK {schedule} x DDP {mode}") for line in lines) == 1, \
                lines


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


def _resume(tmp_path, kinds, ranks, kill=False):
    """6 steps in one go == 3 steps, a checkpoint, and 3 more in new processes (other
    seeds), bit for bit, on every rank (tests/distributed/checkpoint.py); ``kill``: a save
    whose rank 1 is killed mid-write comes between."""
    for run in ("first", "killed", "resume") if kill else ("first", "resume"):
        # (a killed job saves its first kind only: it ends there)
        result = mpiexec("checkpoint.py", run, tmp_path / "ckpt", tmp_path,
                         *(kinds[:1] if run == "killed" else kinds), ranks=ranks)
        if run == "killed":
            assert result.returncode != 0 and "outlived" not in result.stderr, result.stderr
            names = os.listdir(tmp_path / "ckpt" / kinds[0])   # the dead rank's temporary
            assert any(n.endswith(".tmp") for n in names), names   # file, until a load
            continue
        assert result.returncode == 0, result.stdout + result.stderr
    for kind in kinds:
        for rank in range(ranks):
            def read(run):
                return json.loads((tmp_path / f"{kind}-{run}-{rank}.json").read_text())
            full, first, resumed = read("full"), read("first"), read("resumed")
            assert len(full) == 6 and first == full[:3], (kind, rank, first, full)
            assert resumed == full[3:], (kind, rank, resumed, full)
        names = sorted(os.listdir(tmp_path / "ckpt" / kind))
        want = ["checkpoint-00000000-rank%05d.safetensors" % r for r in range(ranks)]
        assert set(want + ["manifest.json"]) <= set(names), names
        assert kill or len(names) == len(want) + 1, names   # (a killed save's shards stay
        #                                                   until the next save)


@needs_mpi
def test_resume_from_a_checkpoint_continues_the_same_loss_curve(tmp_path):
    """Data parallel (dropout) and ZeRO (each rank's shard of Adam's moments) on 2 ranks:
    model, optimiser, scaler, sampler epoch and position, and the dualgraph, NumPy and
    Python random streams all come back on every rank. A save that fails on one rank
    leaves the previous checkpoint, and so does one whose rank 1 is killed mid-write (the
    temporary file it leaves is removed when the job loads); a rank whose model differs
    makes every rank raise."""
    _resume(tmp_path, ["ddp", "zero"], 2, kill=True)


@needs_mpi
def test_resume_a_pipeline_times_data_parallel_job(tmp_path):
    """2 stages x 2 replicas on 4 ranks (oversubscribed, about 15 s on 2 cores): every
    rank's shard holds its own stage, and the resumed job continues every rank's curve."""
    _resume(tmp_path, ["pipeline"], 4)


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
    model = Weights(0, 4_000_000)
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
        load_checkpoint(tmp_path, model=Weights(0, 10))
    save_checkpoint(tmp_path, model=Weights(4, 10), step=4)
    with pytest.raises(CheckpointError, match=r"rank 0: this rank's model state \(name, "
                       r"shape\) differ from the checkpoint's: item 0 was \['w', \[10\]\], "
                       r"is \['w', \[3\]\]"):
        load_checkpoint(tmp_path, model=Weights(0, 3))
    with pytest.raises(CheckpointError, match="the checkpoint has no optimizer state"):
        load_checkpoint(tmp_path, model=Weights(0, 10), optimizer=Weights(0))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["world_size"] = 2
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="written by 2 ranks, loaded by 1; restart "
                       "with mpiexec -n 2"):
        load_checkpoint(tmp_path, model=Weights(0, 10))


# -- two "hosts": network namespaces joined by a veth pair ----------------------------------
LAUNCHER = """#!/bin/sh
# mpiexec's ssh launcher runs: <this> [-x] HOST COMMAND; run COMMAND in HOST's namespace
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
case "$host" in
%s
*) echo "netns launcher: unknown host $host" >&2; exit 1;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""
HOSTS = ("10.77.0.1", "10.77.0.2")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _namespaces_or_skip():
    """Two namespaces, each with one end of a veth pair named dgt0 and an address in it
    (nothing is created outside them but the pair, which moves in at once)."""
    if not sys.platform.startswith("linux") or shutil.which("ip") is None:
        pytest.skip("the two-host test needs Linux network namespaces (the ip command)")
    names = [f"dgtest{os.getpid()}{side}" for side in "ab"]
    made = []
    try:
        for ns in names:
            result = _ip("netns", "add", ns, check=False)
            if result.returncode:
                pytest.skip("the two-host test needs `ip netns add` (root, or "
                            f"CAP_SYS_ADMIN): {result.stderr.strip()}")
            made.append(ns)
        ends = [f"dg{os.getpid() % 10_000_000}{side}" for side in "ab"]
        _ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for ns, end, address in zip(names, ends, HOSTS):
            _ip("link", "set", end, "netns", ns)
            _ip("-n", ns, "link", "set", end, "name", "dgt0")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "dgt0")
            _ip("-n", ns, "link", "set", "dgt0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except BaseException:
        _remove_namespaces(made)
        raise
    return names


def _remove_namespaces(names):
    """Kill what still runs in them (the job's processes), then delete them (and the veth
    pair with them)."""
    for ns in names:
        pids = _ip("netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", ns, check=False)


def _wait_for(paths, seconds, job):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return True
        if job.poll() is not None:
            return False
        time.sleep(0.05)
    return False


@needs_mpi
def test_two_hosts_over_tcp_ddp_and_a_cut_link(tmp_path):
    """One rank in each of two network namespaces over TCP (MPICH's default transport
    would use shared memory between them): DDP equals one process; cutting the link
    (``ip link set down``) makes the next collective fail on both sides at the 2 s
    deadline. The namespaces are always removed."""
    names = _namespaces_or_skip()
    job = None
    try:
        launcher = tmp_path / "netns_launcher.sh"
        launcher.write_text(LAUNCHER % "\n".join(
            f"{address}) ns={ns};;" for address, ns in zip(HOSTS, names)))
        launcher.chmod(0o755)
        env = dict(os.environ, PYTHONPATH=str(ROOT), DUALGRAPH_NUM_THREADS="1",
                   MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="tcp", FI_TCP_IFACE="dgt0")
        env.pop("PYTEST_XDIST_WORKER", None)
        log = tmp_path / "job.txt"
        with open(log, "w") as out:
            # mpiexec in the first namespace: its proxy on the second "host" reaches it
            # over the veth pair (-iface)
            job = subprocess.Popen(
                ["ip", "netns", "exec", names[0], MPIEXEC, "-launcher", "ssh",
                 "-launcher-exec", str(launcher), "-iface", "dgt0", "-hosts",
                 ",".join(HOSTS), "-n", "2", sys.executable,
                 str(HERE / "distributed" / "multihost.py"), str(tmp_path)],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                start_new_session=True)
        ready = [tmp_path / f"ready-{r}" for r in range(2)]
        assert _wait_for(ready, 90, job), log.read_text()
        netns = {p.read_text().split()[0] for p in ready}
        assert len(netns) == 2, netns   # one rank in each namespace
        _ip("-n", names[0], "link", "set", "dgt0", "down")
        reports = [tmp_path / f"report-{r}" for r in range(2)]
        assert _wait_for(reports, 10, job) or all(p.exists() for p in reports), (
            "no deadline error 10 s after the link was cut (did MPI use shared memory?)\n"
            + log.read_text())
        for rank, report in enumerate(reports):
            waited, message = report.read_text().split("\n", 1)
            assert 1.9 <= float(waited) <= 3.5, (rank, waited)
            assert message.startswith("DeadlineError: all_reduce(SUM)"), message
            assert f"rank {1 - rank} did not arrive" in message, message
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        _remove_namespaces(names)


def test_a_checkpoint_brings_back_the_random_streams(tmp_path):
    """dualgraph's stream and its compiled graphs' seed, NumPy's and Python's."""
    import random
    from dualgraph.distributed.checkpoint import load_checkpoint, save_checkpoint
    from dualgraph.ops.random import default_generator
    dg.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    default_generator.seed_state._data[...] = 12345
    save_checkpoint(tmp_path, step=0)

    def draws():
        return (dg.rand(3).numpy().tolist(), np.random.rand(3).tolist(), random.random(),
                int(default_generator.seed_state._data))
    want = draws()
    dg.manual_seed(4)
    np.random.seed(4)
    random.seed(4)
    default_generator._seed_state = None   # as in a new process
    load_checkpoint(tmp_path)
    assert draws() == want
