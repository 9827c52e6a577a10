"""Random number generation: a seeded global generator and explicit ``Generator`` objects.

The streams are NumPy's PCG64, so results are reproducible across runs and platforms for a
given seed, but they are not the same numbers as torch's for the same seed (tests that need
identical weights copy them).

Random tensors (``dg.rand``, ``randn``, ``randint``, ``randperm``, the gamma and Poisson
draws of ``dg.distributions`` and what is built on them: dropout, ``bernoulli``,
``normal_``, ...) are one draw each from the generator's *seed
state*, a persistent int64 tensor: the draw's numbers are a function of the seed it reads
(:func:`seeded_stream`), and the seed then advances by one. Eagerly the op runs on the seed's
value now; while tracing it becomes a ``random`` node fed by the seed state, which the graph
advances at every call. So a compiled function draws fresh numbers each call, and the same
numbers as eager code from the same state: ``dg.manual_seed(0); f(x)`` gives the same result
compiled or not, dropout included. Other draws (``nn.init``, ``multinomial``, the samplers'
shuffles) come from the generator's PCG64 stream (``rng_of``) and run eagerly.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from .. import devices
from ..dispatch import apply, modes
from ..shapes import ShapedType, broadcast_shapes
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
        """The PCG64 stream's state and the seed state (``seed_state``): giving it to
        :meth:`set_state` later makes the same draws again."""
        return {**self.rng.bit_generator.state, "seed_state": int(self.seed_state._data)}

    def set_state(self, state: dict) -> None:
        state = dict(state)
        seed = state.pop("seed_state", None)
        self.rng.bit_generator.state = state
        if seed is not None:
            self.seed_state._data[...] = np.int64(seed)

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


class _Stream(threading.local):
    rng = None     # this thread's PCG64 generator, put at a draw's seed before each draw
    state = None   # its state as NumPy takes it (one dict, its state number rewritten)


_stream = _Stream()
_MASK = (1 << 64) - 1
# (PCG64's stream increment: any odd number; every draw walks the same cycle of 2**128
# states from its own start)
_INCREMENT = 0xDA3E39CB94B95BDB


def _mix(x: int) -> int:
    """SplitMix64's output function: 64 well-mixed bits of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def seeded_stream(seed) -> np.random.Generator:
    """The numbers of the draw that reads ``seed``: a PCG64 generator started at a state
    hashed from the seed (128 bits, so two draws' runs of numbers overlap with negligible
    probability). Eager ops and compiled graphs both call it, so they draw the same numbers;
    putting one generator at a state (a few microseconds) is ten times cheaper than seeding
    a new one through NumPy's ``SeedSequence``."""
    seed = int(seed)
    rng, state = _stream.rng, _stream.state
    if rng is None:
        rng = _stream.rng = np.random.Generator(np.random.PCG64(0))
        state = _stream.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                                 "state": {"state": 0, "inc": _INCREMENT}}
    state["state"]["state"] = _mix(seed) << 64 | _mix(seed ^ 0x5EED)
    rng.bit_generator.state = state
    return rng


def _random_kernel(seed, shape, dtype, dist):
    rng = seeded_stream(seed)
    sample = rng.random(shape) if dist == "uniform" else rng.standard_normal(shape)
    return sample.astype(dtype)


RANDOM = defop("random", _random_kernel,
               lambda seed, shape, dtype, dist: ShapedType(tuple(shape), np.dtype(dtype)),
               attrs=("shape", "dtype", "dist"), onnx=None,
               doc="Samples of ``dist`` ('uniform' in [0, 1) or 'normal') from a seed input.")

RANDOM_INTEGERS = defop(
    "random_integers",
    lambda seed, shape, low, high, dtype:
        seeded_stream(seed).integers(low, high, size=shape).astype(dtype),
    lambda seed, shape, low, high, dtype: ShapedType(tuple(shape), np.dtype(dtype)),
    attrs=("shape", "low", "high", "dtype"), onnx=None,
    doc="Integers uniform in [low, high) from a seed input (``randint``).")

RANDOM_PERMUTATION = defop(
    "random_permutation",
    lambda seed, n, dtype: seeded_stream(seed).permutation(n).astype(dtype),
    lambda seed, n, dtype: ShapedType((n,), np.dtype(dtype)),
    attrs=("n", "dtype"), onnx=None,
    doc="A permutation of range(n) from a seed input (``randperm``).")


def _parametric(name: str, method: str, doc: str, kinds=(np.float64,)):
    """A draw of ``shape`` (broadcast with its parameters' shape) from the seeded stream's
    ``method`` with per-element parameters (tensor inputs after the seed, passed to NumPy
    as ``kinds``)."""
    def kernel(seed, *params, shape, dtype):
        out = broadcast_shapes(tuple(shape), *(np.shape(p) for p in params))
        params = [np.broadcast_to(np.asarray(p).astype(kind), out)
                  for p, kind in zip(params, kinds, strict=True)]
        return getattr(seeded_stream(seed), method)(*params, size=out).astype(dtype)

    def infer(seed, *params, shape, dtype):
        out = broadcast_shapes(tuple(shape), *(tuple(p.shape) for p in params))
        return ShapedType(out, np.dtype(dtype))

    return defop(name, kernel, infer, attrs=("shape", "dtype"), onnx=None, doc=doc)


# (the samplers no transform of uniforms or normals gives: Gamma and what is built on it -
# Beta, Dirichlet, Chi2, StudentT - and Poisson / Binomial counts; not differentiable)
RANDOM_GAMMA = _parametric(
    "random_gamma", "standard_gamma",
    "Gamma(concentration, 1) samples from a seed input and the concentration.")
RANDOM_POISSON = _parametric(
    "random_poisson", "poisson", "Poisson(rate) counts from a seed input and the rate.")
RANDOM_BINOMIAL = _parametric(
    "random_binomial", "binomial",
    "Binomial(total_count, probs) counts from a seed input, the counts and the probs.",
    (np.int64, np.float64))


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


def draw(op, generator=None, inputs=(), params=(), **attrs):
    """One draw: ``op`` (``RANDOM``, ``RANDOM_INTEGERS``, ``RANDOM_PERMUTATION``; an op of
    ``inputs`` that draws, ``DROPOUT``, called as ``op(*inputs, seed)``; or one of the
    parametric draws with its tensor ``params``, read without gradient, called as
    ``op(seed, *params)``) on the generator's seed state, which then advances by one;
    eagerly at once, while tracing as a node and a traced in-place update (written back
    after every call), so both draw the same numbers from the same state. Inside a
    checkpointed region's recomputation the seeds its forward read are read again, in
    order, and the state does not advance."""
    replay = _draws.replay
    if replay is not None:
        if not replay:
            raise RuntimeError(
                "checkpoint: the recomputation draws more random tensors than the forward "
                "did; a checkpointed function must make the same draws every time it runs")
        seed = replay.pop(0)
    else:
        seed = (generator or default_generator).seed_state
    traced = modes.building_graph()
    params = tuple(p.detach() for p in params)
    if traced:
        out = apply(op, *inputs, seed, *params, **attrs)
    elif inputs:   # (the seed's value now, as a number: the state changes below in place)
        out = apply(op, *inputs, int(seed._data), **attrs)
    elif params:   # (through dispatch, which checks the parameters' shapes as compiled)
        out = apply(op, seed, *params, **attrs)
    else:   # (a creation function's draw: no input needs a gradient or a tape entry)
        out = Tensor._make(op.kernel(seed._data, **attrs))
    for log in _draws.logs:   # (the value read, which the update below replaces)
        log.append(Tensor._make(seed._data if traced else seed._data.copy()))
    if replay is None:
        if traced:
            commit_inplace(seed, seed + 1)
        else:
            seed._data[()] = int(seed._data) + 1   # (in place: graphs hold this array)
    return out


# -- dropout -------------------------------------------------------------------------------
def mask_shape(shape, lead):
    """One mask entry per element (``lead`` None), or per position of the first ``lead``
    dims (whole channels: dropout2d's), broadcast over the rest."""
    return tuple(shape) if lead is None else tuple(shape[:lead]) + (1,) * (len(shape) - lead)


def _dropout_kernel(x, seed, p, lead):
    """``x`` times the mask, and the mask: 0 where a float32 uniform of the seed's stream is
    at least ``1 - p``, else ``1 / (1 - p)`` in x's dtype (the numbers of ``dg.rand``'s
    draw from the same seed, compared and scaled as ``x * ((u < 1 - p).to(x.dtype) / (1 -
    p))`` computes them, to the bit)."""
    keep = _random_kernel(seed, mask_shape(x.shape, lead), np.float32, "uniform") < (1 - p)
    if x.dtype.itemsize < 4:   # (half precision: divided in float32, as torch's div by a number)
        mask = (keep.astype(np.float32) / np.float32(1 - p)).astype(x.dtype)
    else:
        mask = keep.astype(x.dtype) / (1 - p)
    return x * mask, mask


def _infer_dropout(x, seed, p, lead):
    return (ShapedType(tuple(x.shape), x.dtype),
            ShapedType(mask_shape(x.shape, lead), x.dtype))


# One op each way: the forward draws its mask and applies it (what four ops and a draw did),
# the VJP multiplies by the mask it kept, as torch's fused dropout does.
DROPOUT = defop("dropout", _dropout_kernel, _infer_dropout,
                vjp=lambda g, out, x, seed, p, lead: (g[0] * out[1], None),
                attrs=("p", "lead"), num_outputs=2, saves="o", saved_outputs=(1,),
                differentiable_outputs=(0,), onnx=None,
                doc="Dropout of ``x`` with probability ``p`` from a seed input: the result "
                    "and its scaled mask (one entry per element, or per position of the "
                    "first ``lead`` dims).")


def dropout(x: Tensor, p: float, lead: int | None = None, generator=None) -> Tensor:
    """``x`` with each element (or each position of its first ``lead`` dims) zeroed with
    probability ``0 < p < 1`` and the rest scaled by ``1 / (1 - p)``: one draw from the
    generator's seed state, so eager and compiled code drop the same elements."""
    return draw(DROPOUT, generator, inputs=(x,), p=float(p), lead=lead)[0]
