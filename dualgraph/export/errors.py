"""The error ONNX export and import raise, and the import of the ``onnx`` package itself."""
from __future__ import annotations


class OnnxError(ValueError):
    """A model that can't be exported or imported: names the op (and, on export, the user's
    source line) and what to do."""


def require_onnx():
    """The ``onnx`` package, or an error saying how to install it."""
    try:
        import onnx
    except ImportError as e:    # pragma: no cover - the test extra installs it
        raise ImportError("dualgraph's ONNX export and import need the onnx package: "
                          "pip install 'dualgraph[onnx]' (or pip install onnx)") from e
    return onnx
