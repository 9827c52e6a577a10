"""Random number generation: a seeded global generator and explicit ``Generator`` objects.

The streams are NumPy's PCG64, so results are reproducible across runs and platforms for a
given seed, but they are not the same numbers as torch's for the same seed (tests that need
identical weights copy them).

While tracing, random tensors (``dg.rand`` in dropout, say) become ``random`` nodes fed by
the generator's *seed state*, a persistent int64 tensor that the graph advances at every
call: a compiled function draws fresh numbers each call instead of baking one draw in (its
numbers differ from the eager stream's).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from .. import devices
from ..dispatch import apply
from ..shapes import ShapedType
from ..tensor import Tensor
from .inplace import commit_inplace
from .opdef import defop


class Generator:
    """A random stream: ``g = dg.Generator().manual_seed(0)``; pass it as ``generator=g``."""

    def __init__(self, seed: int | None = None, *, device=None):
        if isinstance(seed, (str, devices.device)):   # torch's Generator(device)
            seed, device = None, seed
        devices.check(device)
        self._seed = 0 if seed is None else int(seed)
        self.rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self.rng = np.random.default_rng(self._seed)
        state = getattr(self, "_seed_state", None)
        if state is not None:   # compiled graphs hold this tensor: reseed it in place
            state._data[...] = self._graph_seed()
        return self

    def _graph_seed(self) -> int:
        """The first seed compiled graphs draw from: a function of the stream's seed, not a
        draw from the stream, so that compiling a random op never shifts eager's numbers
        (``dg.manual_seed(0); dg.rand(4)`` is the same whatever ran before)."""
        return int(np.random.SeedSequence([self._seed, 0x5EED]).generate_state(
            1, np.uint64)[0] % 2 ** 62)

    def initial_seed(self) -> int:
        return self._seed

    @property
    def device(self) -> devices.device:
        return devices.CPU

    def get_state(self) -> dict:
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state

    @property
    def seed_state(self) -> Tensor:
        """The persistent seed traced random nodes read (:meth:`_graph_seed` at first)."""
        if getattr(self, "_seed_state", None) is None:
            self._seed_state = Tensor._make(np.array(self._graph_seed(), dtype=np.int64))
        return self._seed_state


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed the global generator (as ``torch.manual_seed``)."""
    return default_generator.manual_seed(seed)


def rng_of(generator) -> np.random.Generator:
    return (generator or default_generator).rng


def _random_kernel(seed, shape, dtype, dist):
    rng = np.random.default_rng(int(seed))
    sample = rng.random(shape) if dist == "uniform" else rng.standard_normal(shape)
    return sample.astype(dtype)


RANDOM = defop("random", _random_kernel,
               lambda seed, shape, dtype, dist: ShapedType(tuple(shape), np.dtype(dtype)),
               attrs=("shape", "dtype", "dist"), onnx=None,
               doc="Samples of ``dist`` ('uniform' in [0, 1) or 'normal') from a seed input.")


class _Draws(threading.local):
    logs: tuple = ()     # lists the seeds of traced draws are appended to
    replay = None        # seeds a recomputation draws from, in order, instead


_draws = _Draws()


@contextlib.contextmanager
def recording_draws():
    """``with recording_draws() as seeds:``, the seed value of every traced draw made
    inside is appended to ``seeds`` (a checkpointed region's, autograd/checkpoint.py)."""
    seeds: list = []
    outer = _draws.logs
    _draws.logs = outer + (seeds,)
    try:
        yield seeds
    finally:
        _draws.logs = outer


@contextlib.contextmanager
def replaying_draws(seeds: list):
    """Traced draws inside read ``seeds`` in order and advance no seed state, so a
    recomputation draws what the region's forward drew."""
    outer, _draws.replay = _draws.replay, list(seeds)
    try:
        yield
    finally:
        _draws.replay = outer


def traced_random(shape, dtype, dist: str, generator=None) -> Tensor:
    """A random tensor inside a traced function: a ``random`` node, then the seed state
    advances (a traced in-place update, written back after every call)."""
    replay = _draws.replay
    if replay is not None:
        if not replay:
            raise RuntimeError(
                "checkpoint: the recomputation draws more random tensors than the forward "
                "did; a checkpointed function must make the same draws every time it runs")
        seed = replay.pop(0)
    else:
        seed = (generator or default_generator).seed_state
    out = apply(RANDOM, seed, shape=tuple(shape), dtype=np.dtype(dtype), dist=dist)
    for log in _draws.logs:   # (the value read, which the update below replaces)
        log.append(Tensor._make(seed._data))
    if replay is None:
        commit_inplace(seed, seed + 1)
    return out
