"""The ONNX import's entry (``dg.onnx.load``): a model whose inputs are tensors is imported
once (``onnx_import``), one with sequence or optional inputs once per structure of the
inputs it is called with (``onnx_structured``)."""
from __future__ import annotations

from .onnx_import import import_model, read_model
from .onnx_structured import Structured


def load(path_or_model):
    """The compiled function of an ONNX model (a path or an ``onnx.ModelProto``)."""
    onnx, model, label = read_model(path_or_model)
    if any(not i.type.HasField("tensor_type") for i in model.graph.input):
        return Structured(onnx, model, label)
    return import_model(onnx, model, label)
