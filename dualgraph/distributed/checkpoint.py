"""Checkpoint and restart for distributed training (docs/distributed_pipeline.md): every
rank's part of the job (its model, which a pipeline's stages hold different parts of; its
optimiser, which holds one shard of the state under ``ZeroRedundancyOptimizer``; a scaler,
anything with ``state_dict()``; the sampler's epoch and position; its random states:
dualgraph's, NumPy's and Python's), so that a job restarted from a checkpoint continues the
same loss curve.

A checkpoint is a directory. :func:`save_checkpoint` is called by every rank, and every
rank writes its own shard, ``checkpoint-<serial>-rank<r>.safetensors`` (``dg.save``'s
format: no pickle), atomically (a temporary file in the directory, fsync, rename, fsync of
the directory). Once every shard is durable, rank 0 writes ``manifest.json``, naming each
shard with its rank, size and SHA-256 and each rank's layout (the world size, the process
groups made, the shapes of its model's state and of its optimiser's parameters); its
rename is the commit: a job killed at any point leaves the manifest naming the previous,
complete set of shards. Files of killed writers (temporary files, shards no manifest
names) are removed by the next save, and the temporary ones by :func:`load_checkpoint`
too. Loading checks the world size and this rank's layout against the manifest, and the
shard's size and checksum, before it changes anything; a problem on any rank raises
:class:`CheckpointError` on every rank, naming the ranks and what does not match. Each rank
reads its own shard, so the directory must be visible to all ranks (e.g. on a shared file
system).

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
VERSION = 2   # (1: one file of rank 0's model and optimiser, every rank's random states)
_PREFIX, _SUFFIX = "checkpoint-", ".safetensors"
_PARTS = ("model", "optimizer", "scaler")


class CheckpointError(io.LoadError):
    """A checkpoint that can't be loaded (missing, corrupted, written by another world
    size or layout), or a save that failed on some rank."""


def save_checkpoint(path, *, model=None, optimizer=None, scaler=None, sampler=None,
                    position: int = 0, step: int | None = None, extra=None) -> None:
    """Write a checkpoint into the directory ``path`` (created if needed); every rank calls
    it and writes its own shard: its ``model``, ``optimizer`` and ``scaler`` state, random
    states, the sampler's epoch and ``position`` (how far into the epoch training got,
    batches or samples, as the caller counts them) and ``extra`` (anything ``dg.save``
    stores).

    >>> save_checkpoint("ckpt", model=ddp, optimizer=opt, step=100)
    """
    path = os.fspath(path)
    rank, size, comm = _world()
    serial = np.full(1, -1, np.int64)   # (-1: rank 0 could not prepare the directory)
    if rank == 0:
        serial[0] = _prepare(path)
    if comm is not None:
        serial = comm.broadcast(serial, 0).wait()
    if serial[0] < 0:
        raise CheckpointError(f"{path}: rank 0 could not create the checkpoint directory "
                              "(its error says why); the previous checkpoint is unchanged")
    report = {}
    try:
        report["layout"] = _layout(model, optimizer, size)
        own = {"rng": _rng_state(), "sampler": _sampler_state(sampler, position)}
        state = {"step": step, "extra": extra, "rank": rank, "own": json.dumps(own)}
        state.update({name: obj.state_dict() for name, obj in
                      zip(_PARTS, (model, optimizer, scaler)) if obj is not None})
        name = _shard_name(int(serial[0]), rank)
        buffer = _bytes_io.BytesIO()
        io.save(state, buffer)
        data = buffer.getvalue()
        write_atomic(os.path.join(path, name), data)
        report["file"] = {name: {"rank": rank, "bytes": len(data),
                                 "sha256": hashlib.sha256(data).hexdigest()}}
    except Exception as e:   # every rank learns of it below, instead of hanging
        report["error"] = f"{type(e).__name__}: {e}"
    reports = [json.loads(r) for r in _gather_strings(comm, json.dumps(report), size)]
    failed = {r: rep["error"] for r, rep in enumerate(reports) if "error" in rep}
    if rank == 0:
        try:
            _commit(path, int(serial[0]), step, reports, failed)
        except Exception as e:
            failed[0] = f"{type(e).__name__}: {e} (writing the manifest)"
    done = np.array([0 if failed else 1], np.int64)
    if comm is not None:
        done = comm.broadcast(done, 0).wait()
    if not done[0]:
        said = "; ".join(f"rank {r}: {why}" for r, why in sorted(failed.items()))
        raise CheckpointError(f"{path}: the checkpoint could not be written ("
                              f"{said or 'see rank 0'}); the previous checkpoint is "
                              "unchanged")


def load_checkpoint(path, *, model=None, optimizer=None, scaler=None, sampler=None) -> dict:
    """Load this rank's shard of the checkpoint in directory ``path`` into the objects
    given, restore this rank's random states and the sampler's epoch, and return
    ``{"step", "position", "extra"}``. Every rank calls it. Raises :class:`CheckpointError`
    on every rank if on any rank the manifest or its shard is missing, has another size or
    checksum, or was written by a job of another world size or layout (other process
    groups, other parameter shapes: another pipeline split or ZeRO partition).

    >>> info = load_checkpoint("ckpt", model=ddp, optimizer=opt)
    """
    path = os.fspath(path)
    rank, size, comm = _world()
    error, state = None, None
    try:
        manifest = _read_manifest(path)
        if manifest["world_size"] != size:
            raise CheckpointError(
                f"written by {manifest['world_size']} ranks, loaded by {size}; restart "
                f"with mpiexec -n {manifest['world_size']}")
        _check_layout(manifest["layouts"][rank], _layout(model, optimizer, size))
        name, meta = next((n, m) for n, m in manifest["files"].items() if m["rank"] == rank)
        state = io.load(_bytes_io.BytesIO(_read_verified(os.path.join(path, name), meta)))
        for key, obj in zip(_PARTS, (model, optimizer, scaler)):
            if obj is not None and key not in state:
                raise CheckpointError(f"the checkpoint has no {key} state")
    except Exception as e:
        error = str(e) if isinstance(e, CheckpointError) else f"{type(e).__name__}: {e}"
    errors = _gather_strings(comm, json.dumps(error), size)
    said = {r: json.loads(e) for r, e in enumerate(errors) if json.loads(e) is not None}
    if said:
        where = "; ".join(f"rank {r}: {why}" for r, why in said.items())
        raise CheckpointError(f"{path}: can't load this checkpoint ({where})")
    if rank == 0:
        _remove_stale_temps(path)
    for key, obj in zip(_PARTS, (model, optimizer, scaler)):
        if obj is not None:
            obj.load_state_dict(state[key])
    own = json.loads(state["own"])
    _set_rng_state(own["rng"])
    saved = own["sampler"]
    if sampler is not None and saved["epoch"] is not None:
        sampler.set_epoch(saved["epoch"])
        if saved["seed"] is not None:
            sampler.seed = saved["seed"]
    return {"step": state["step"], "position": saved["position"], "extra": state["extra"]}


# -- the directory, the manifest, the shards ------------------------------------------------
def _shard_name(serial: int, rank: int) -> str:
    # a new name every save: the manifest goes on naming the previous shards until it commits
    return f"{_PREFIX}{serial:08d}-rank{rank:05d}{_SUFFIX}"


def _prepare(path: str) -> int:
    """Rank 0, before any rank writes: the directory, cleared of killed writers' temporary
    files (none of this save's can exist yet, on any host), and the new serial number."""
    try:
        os.makedirs(path, exist_ok=True)
        _remove_stale_temps(path)
    except OSError:
        return -1
    old = _manifest_or_none(path)
    return old["serial"] + 1 if old else 0


def _commit(path: str, serial: int, step, reports: list, failed: dict) -> None:
    """Rank 0, once every rank's shard is durable: the manifest (its rename commits the
    checkpoint), then the shards it does not name go. After a failed save only this
    save's shards go: the previous checkpoint stays as it was."""
    names = {}
    if not failed:
        for report in reports:
            names.update(report["file"])
        manifest = {"format": FORMAT, "version": VERSION, "serial": serial, "step": step,
                    "world_size": len(reports),
                    "layouts": [report["layout"] for report in reports], "files": names}
        write_atomic(os.path.join(path, MANIFEST), json.dumps(manifest, indent=1).encode())
    prefix = f"{_PREFIX}{serial:08d}-"
    for other in os.listdir(path):   # earlier checkpoints, files of killed writers
        stale = (failed and other.startswith(prefix)) or (not failed and other not in names)
        if stale and other.startswith(_PREFIX) and other.endswith(_SUFFIX):
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
        ok = manifest["format"] == FORMAT and type(manifest["serial"]) is int
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


# -- a rank's layout: what its shard fits ----------------------------------------------------
def _layout(model, optimizer, size: int) -> dict:
    """What must be the same for this rank's shard to load: the world size, the process
    groups made (their global ranks), the shape of each entry of the model's state and of
    each parameter the optimiser updates (a ZeRO shard's, a pipeline stage's)."""
    def shapes(items):
        return [[key, list(getattr(t, "shape", ()))] for key, t in items]
    layout = {"world_size": size, "groups": sorted(list(g) for g in _c.STATE.groups)}
    if model is not None:
        layout["model"] = shapes(model.state_dict().items())
    if optimizer is not None:
        layout["optimizer"] = shapes((f"group {i} parameter {j}", p) for i, g in
                                     enumerate(getattr(optimizer, "param_groups", []))
                                     for j, p in enumerate(g["params"]))
    return layout


def _check_layout(saved: dict, now: dict) -> None:
    for key, what in (("groups", "process groups (global ranks)"),
                      ("model", "model state (name, shape)"),
                      ("optimizer", "optimiser parameters (shape)")):
        if key in now and key not in saved:
            raise CheckpointError(f"the checkpoint has no {key} state")
        if key in now and saved[key] != now[key]:
            first = _first_difference(saved[key], now[key])
            raise CheckpointError(
                f"this rank's {what} differ from the checkpoint's: {first}. Rebuild the job "
                "as it was when it saved (the same groups, pipeline split, ZeRO partition)")


def _first_difference(saved: list, now: list) -> str:
    for i, (a, b) in enumerate(zip(saved, now)):
        if a != b:
            return f"item {i} was {a}, is {b}"
    return f"the checkpoint has {len(saved)} items, this rank {len(now)}"


# -- every rank's own state ---------------------------------------------------------------------
def _world():
    comm = _c.STATE.comm
    if comm is None or comm.size == 1:
        return 0, 1, None
    return comm.rank, comm.size, comm


def _gather_strings(comm, text: str, size: int) -> list[str]:
    """Every rank's ``text``, on every rank (as bytes over two all-gathers)."""
    if comm is None:
        return [text]
    raw = np.frombuffer(text.encode(), np.uint8)
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
