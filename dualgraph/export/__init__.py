"""ONNX export (a traced graph -> an ONNX model) and import (an ONNX model -> a graph that
runs on dualgraph's kernels). The public names are in ``dualgraph/onnx.py``; ``onnx`` is an
optional dependency (``pip install dualgraph[onnx]``), imported only when these run."""
