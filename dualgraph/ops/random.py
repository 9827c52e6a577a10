"""Random number generation: a seeded global generator and explicit ``Generator`` objects.

The streams are NumPy's PCG64, so results are reproducible across runs and platforms for a
given seed, but they are not the same numbers as torch's for the same seed (tests that need
identical weights copy them).
"""
from __future__ import annotations

import numpy as np


class Generator:
    """A random stream: ``g = dg.Generator().manual_seed(0)``; pass it as ``generator=g``."""

    def __init__(self, seed: int | None = None):
        self._seed = 0 if seed is None else int(seed)
        self.rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self.rng = np.random.default_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> dict:
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed the global generator (as ``torch.manual_seed``)."""
    return default_generator.manual_seed(seed)


def rng_of(generator) -> np.random.Generator:
    return (generator or default_generator).rng
