"""The scalar functions and intrinsics the loops call, declared without importing Numba:
plain Python objects that ``build.py`` compiles when a loop using them compiles. A module of
its own so that ``build.py`` can read them without importing the package that loads loops.
"""
from __future__ import annotations


class Helper:
    """A scalar function the loops call. Called from Python it is the plain function
    (``python``, if given, stands in for a Numba-only body); when a loop using it compiles,
    Numba compiles it with ``options`` (``build.compiled_helper``)."""

    def __init__(self, fn, options: dict, python=None):
        self.fn, self.options, self.python = fn, options, python or fn
        self.__name__, self.__qualname__ = fn.__name__, fn.__qualname__
        self.__module__, self.__doc__ = fn.__module__, fn.__doc__

    def __call__(self, *args):
        return self.python(*args)


def helper(fn=None, *, python=None, **options):
    """Decorator: ``fn`` becomes a :class:`Helper`; ``options`` are Numba's ``njit``
    options (e.g. ``inline="always"`` to inline it in Numba's IR)."""
    if fn is None:
        return lambda f: Helper(f, options, python)
    return Helper(fn, options, python)


class Intrinsic:
    """A Numba intrinsic (``numba.extending.intrinsic``), declared without importing Numba:
    ``fn(typingctx, *args) -> (signature, codegen)``, importing what it needs itself."""

    def __init__(self, fn):
        self.fn, self.__name__ = fn, fn.__name__
