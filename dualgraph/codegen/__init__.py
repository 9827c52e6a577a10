"""Graph -> executable code. Today: the Executable runs the reference interpreter."""
from .executable import Executable  # noqa: F401
