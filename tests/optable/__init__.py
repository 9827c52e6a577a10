"""The op test table: one row per registry op, checked against PyTorch and finite differences.

A row is an :class:`OpCase`: the op it covers, a function written once against the shared
torch-style API (``fn(lib, *inputs)`` runs with ``lib`` = ``dualgraph`` and ``lib`` = ``torch``),
and input specs. Each family has a module here listing its ``CASES``; ``test_ops.py`` runs them
all and fails when a registry op has no row, or when a row never runs the op it names
(eagerly or in its traced graph).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class In:
    """An input spec: a random array of ``shape``. ``kind``: "float" (normal), "pos"
    (positive, away from 0), "unit" (in (-0.9, 0.9)), "distinct" (well-separated floats),
    "int" (in [low, high)), "bool", or "custom" (``fn(rng, float_dtype)`` makes the array;
    its gradient is checked when the array is floating and ``grad`` is set)."""
    shape: tuple
    kind: str = "float"
    low: int = 0
    high: int = 5
    grad: bool = True        # float inputs only: whether to check its gradient
    dtype: str | None = None  # fixed dtype (else the case's dtype for floats)
    fn: Callable | None = None  # kind "custom": fn(rng, float_dtype) -> array

    def make(self, rng: np.random.Generator, float_dtype: str) -> np.ndarray:
        if self.kind == "float":
            a = rng.standard_normal(self.shape)
        elif self.kind == "pos":
            a = rng.uniform(0.5, 2.0, self.shape)
        elif self.kind == "unit":
            a = rng.uniform(-0.9, 0.9, self.shape)
        elif self.kind == "distinct":  # well-separated values: max/sort/topk have stable grads
            a = rng.permutation(int(np.prod(self.shape))).reshape(self.shape) * 0.1 + 0.05
            a = a - a.mean()
        elif self.kind == "int":
            return rng.integers(self.low, self.high, self.shape).astype(self.dtype or "int64")
        elif self.kind == "bool":
            return rng.random(self.shape) < 0.5
        elif self.kind == "custom":
            return self.fn(rng, float_dtype)
        else:
            raise ValueError(self.kind)
        return a.astype(self.dtype or float_dtype)

    @property
    def is_float(self) -> bool:
        if self.kind == "custom":
            return self.grad and self.fn(np.random.default_rng(0), "float64").dtype.kind == "f"
        return self.kind in ("float", "pos", "unit", "distinct")


@dataclass
class OpCase:
    op: str                         # the registry op this row covers
    fn: Callable                    # fn(lib, *inputs) -> tensor or tuple of tensors
    inputs: list                    # In specs or plain Python values (passed through)
    name: str = ""                  # distinguishes several rows of one op
    dtypes: tuple = ("float32",)    # float dtypes to check the forward in
    grad: bool = True               # check gradients (vs torch and finite differences)
    gradcheck: bool = True          # also the float64 finite-difference check
    atol: float = 1e-5
    rtol: float = 1e-4
    extra: dict = field(default_factory=dict)   # "runs_no_op": why the row runs no op

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}" if self.name else self.op
