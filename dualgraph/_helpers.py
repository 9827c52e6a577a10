"""Small helpers with no dualgraph dependencies: where in the user's code are we?"""
from __future__ import annotations

import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIP_PREFIXES = (PACKAGE_DIR, "<frozen ")


def _is_internal(filename: str) -> bool:
    if filename.startswith(_SKIP_PREFIXES):
        return True
    # contextlib and functools frames sit between the user and us (decorators, `with`).
    base = os.path.basename(filename)
    return base in ("contextlib.py", "functools.py") and "python3" in filename


def user_frame(depth: int = 1):
    """The innermost stack frame that is the user's code (outside the dualgraph package)."""
    f = sys._getframe(depth)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back
    return f


def user_location() -> str:
    """``file.py:LINE`` of the user's code calling into dualgraph, or ``<unknown>``."""
    f = user_frame(2)
    if f is None:
        return "<unknown>"
    return f"{f.f_code.co_filename}:{f.f_lineno}"


def short_location(location: str) -> str:
    """A location with the directory dropped, for printing graphs compactly."""
    if location.startswith("<"):
        return location
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"
