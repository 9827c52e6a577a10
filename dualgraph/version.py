"""``torch.version``: what training scripts print and test (``torch.version.cuda`` is None
in a CPU-only build, as here)."""
from ._version import __version__  # noqa: F401

cuda = None
hip = None
debug = False
git_version = "unknown"
