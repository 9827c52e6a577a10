"""Checkpoint and restart for distributed training (docs/distributed_pipeline.md): the
model, the optimiser, a scaler (anything with ``state_dict()``), the sampler's epoch and
position, and every rank's random states (dualgraph's, NumPy's and Python's), so that a
job restarted from a checkpoint continues the same loss curve.

A checkpoint is a directory. :func:`save_checkpoint` is called by every rank: the ranks'
own states (random streams, the sampler's seed, epoch and position) are gathered to rank
0, which writes everything into one safetensors file (``dg.save``'s format: no pickle),
then ``manifest.json``, naming that file with its size and SHA-256. Both are written
atomically (a temporary file in the directory, fsync, rename), and the manifest's rename is
the commit: a writer killed at any point leaves the manifest naming the previous, complete
file. Files of killed writers
(temporary files, a data file no manifest names) are removed by the next save, and the
temporary ones by :func:`load_checkpoint` too. Loading verifies the size and the checksum
before reading anything; every rank reads the file (the directory must be visible to all
ranks, e.g. on a shared file system).

>>> import dualgraph.distributed.checkpoint as dcp
>>> dcp.save_checkpoint("ckpt", model=model, optimizer=opt, sampler=sampler,
...                     position=batches_done, step=step)
>>> info = dcp.load_checkpoint("ckpt", model=model, optimizer=opt, sampler=sampler)
>>> step, batches_done = info["step"], info["position"]
"""
from __future__ import annotations

import hashlib
import io as _bytes_io
import json
import os
import random

import numpy as np

from .. import io
from .._helpers import remove_stale_temps, write_atomic
from ..ops import collective as _c
from ..ops.random import default_generator

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError", "MANIFEST"]

MANIFEST = "manifest.json"
FORMAT = "dualgraph distributed checkpoint"
VERSION = 1
_PREFIX, _SUFFIX = "checkpoint-", ".safetensors"


class CheckpointError(io.LoadError):
    """A checkpoint that can't be loaded (missing, corrupted, for another world size), or a
    save that failed on rank 0."""


def save_checkpoint(path, *, model=None, optimizer=None, scaler=None, sampler=None,
                    position: int = 0, step: int | None = None, extra=None) -> None:
    """Write a checkpoint into the directory ``path`` (created if needed); every rank calls
    it. ``position``: how far into the sampler's current epoch training got (batches or
    samples, as the caller counts them); ``extra``: anything ``dg.save`` stores.

    >>> save_checkpoint("ckpt", model=ddp, optimizer=opt, step=100)
    """
    rank, size, comm = _world()
    mine = json.dumps({"rng": _rng_state(), "sampler": _sampler_state(sampler, position)})
    ranks = _gather_strings(comm, mine, size)
    status = np.zeros(1, np.int64)
    error = None
    if rank == 0:
        state = {"step": step, "world_size": size, "ranks": ranks, "extra": extra}
        for name, obj in (("model", model), ("optimizer", optimizer), ("scaler", scaler)):
            if obj is not None:
                state[name] = obj.state_dict()
        try:
            _write(os.fspath(path), state, step)
        except Exception as e:   # the other ranks learn of it below, instead of hanging
            status[0], error = 1, e
    if comm is not None:
        status = comm.broadcast(status, 0).wait()
    if error is not None:
        raise error
    if status[0]:
        raise CheckpointError(f"rank 0 failed to write the checkpoint {path!s} (its error "
                              "says why); the previous checkpoint is unchanged")


def load_checkpoint(path, *, model=None, optimizer=None, scaler=None, sampler=None) -> dict:
    """Load the checkpoint in directory ``path`` into the objects given, restore this
    rank's random states and the sampler's epoch, and return ``{"step", "position",
    "extra"}``. Raises :class:`CheckpointError` if the manifest or the file it names is
    missing, has another size or checksum, or was written by a job of another size.

    >>> info = load_checkpoint("ckpt", model=ddp, optimizer=opt)
    """
    path = os.fspath(path)
    rank, size, _ = _world()
    manifest = _read_manifest(path)
    _remove_stale_temps(path)
    name, meta = next(iter(manifest["files"].items()))
    data = _read_verified(os.path.join(path, name), meta)
    state = io.load(_bytes_io.BytesIO(data))
    if state["world_size"] != size:
        raise CheckpointError(f"{path}: written by {state['world_size']} ranks, loaded by "
                              f"{size}; restart with mpiexec -n {state['world_size']}")
    for key, obj in (("model", model), ("optimizer", optimizer), ("scaler", scaler)):
        if obj is not None:
            if key not in state:
                raise CheckpointError(f"{path}: the checkpoint has no {key} state")
            obj.load_state_dict(state[key])
    mine = json.loads(state["ranks"][rank])
    _set_rng_state(mine["rng"])
    if sampler is not None and mine["sampler"]["epoch"] is not None:
        sampler.set_epoch(mine["sampler"]["epoch"])
        if mine["sampler"]["seed"] is not None:
            sampler.seed = mine["sampler"]["seed"]
    return {"step": state["step"], "position": mine["sampler"]["position"],
            "extra": state["extra"]}


# -- writing and reading files (rank 0 writes) ----------------------------------------------
def _write(path: str, state: dict, step) -> None:
    os.makedirs(path, exist_ok=True)
    old = _manifest_or_none(path)
    serial = old["serial"] + 1 if old else 0
    # a new name every time: the manifest goes on naming the previous file until it commits
    name = f"{_PREFIX}{serial:08d}{_SUFFIX}"
    _remove_stale_temps(path)
    buffer = _bytes_io.BytesIO()
    io.save(state, buffer)
    data = buffer.getvalue()
    write_atomic(os.path.join(path, name), data)
    manifest = {"format": FORMAT, "version": VERSION, "serial": serial, "step": step,
                "files": {name: {"bytes": len(data),
                                 "sha256": hashlib.sha256(data).hexdigest()}}}
    write_atomic(os.path.join(path, MANIFEST), json.dumps(manifest, indent=1).encode())
    for other in os.listdir(path):   # earlier checkpoints, files of killed writers
        if other != name and other.startswith(_PREFIX) and other.endswith(_SUFFIX):
            os.unlink(os.path.join(path, other))


def _remove_stale_temps(path: str) -> None:
    """Remove the temporary files that writers killed mid-write left in ``path`` (those of
    a live writer stay: ``write_atomic`` names them ``.<file>.<pid>.<random>.tmp``)."""
    for name in os.listdir(path):
        parts = name.split(".")
        if name.startswith(".") and name.endswith(".tmp") and len(parts) > 4:
            remove_stale_temps(os.path.join(path, ".".join(parts[1:-3])))


def _manifest_or_none(path: str):
    try:
        return _read_manifest(path)
    except CheckpointError:
        return None


def _read_manifest(path: str) -> dict:
    where = os.path.join(path, MANIFEST)
    try:
        with open(where, "rb") as f:
            manifest = json.loads(f.read())
        ok = (manifest["format"] == FORMAT and type(manifest["serial"]) is int
              and len(manifest["files"]) == 1)
    except OSError as e:
        raise CheckpointError(f"{where}: no checkpoint here ({e.strerror})") from None
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{where}: corrupted manifest ({e!r:.100})") from None
    if not ok:
        raise CheckpointError(f"{where}: not a {FORMAT} manifest")
    if manifest["version"] != VERSION:
        raise CheckpointError(f"{where}: format version {manifest['version']!r:.20}; this "
                              f"dualgraph reads version {VERSION}")
    return manifest


def _read_verified(where: str, meta: dict) -> bytes:
    try:
        with open(where, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointError(f"{where}: named by the manifest but unreadable "
                              f"({e.strerror})") from None
    if len(data) != meta["bytes"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise CheckpointError(f"{where}: {len(data)} bytes whose SHA-256 is not the "
                              f"manifest's ({meta['bytes']} bytes expected): the file was "
                              "changed or corrupted after it was written")
    return data


# -- every rank's own state ---------------------------------------------------------------------
def _world():
    comm = _c.STATE.comm
    if comm is None or comm.size == 1:
        return 0, 1, None
    return comm.rank, comm.size, comm


def _gather_strings(comm, text: str, size: int) -> list[str]:
    """Every rank's ``text``, on every rank (as bytes over two all-gathers)."""
    raw = np.frombuffer(text.encode(), np.uint8)
    if comm is None:
        return [text]
    lengths = comm.all_gather(np.array([raw.size], np.int64)).wait()[:, 0]
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[:raw.size] = raw
    rows = comm.all_gather(padded).wait()
    return [rows[r, :lengths[r]].tobytes().decode() for r in range(size)]


def _rng_state() -> dict:
    numpy_state = np.random.get_state(legacy=False)
    numpy_state["state"]["key"] = numpy_state["state"]["key"].tolist()
    seed = getattr(default_generator, "_seed_state", None)
    return {"dualgraph": default_generator.get_state(),
            "dualgraph_graph_seed": None if seed is None else int(seed._data),
            "numpy": numpy_state, "python": random.getstate()}


def _set_rng_state(state: dict) -> None:
    if state["dualgraph_graph_seed"] is not None:   # compiled graphs' random streams
        # (first: making the seed tensor draws from the stream set below)
        default_generator.seed_state._data[...] = state["dualgraph_graph_seed"]
    default_generator.set_state(state["dualgraph"])
    numpy_state = state["numpy"]
    numpy_state["state"]["key"] = np.array(numpy_state["state"]["key"], np.uint32)
    np.random.set_state(numpy_state)
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def _sampler_state(sampler, position: int) -> dict:
    epoch, seed = getattr(sampler, "epoch", None), getattr(sampler, "seed", None)
    return {"epoch": None if epoch is None else int(epoch), "position": int(position),
            "seed": None if seed is None else int(seed)}
