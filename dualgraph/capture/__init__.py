"""Capture: dynamic Python -> static graphs (tracing, guards, compile, define-then-run)."""
from .compile import Compiled, compile  # noqa: F401
from .trace import Tracer  # noqa: F401
