"""The package version, in one place (``dualgraph.__version__``; ONNX export's producer)."""
__version__ = "0.1.0"
