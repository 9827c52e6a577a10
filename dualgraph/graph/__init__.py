"""The IR: Graph, Node, Value, printing, verification, interpretation, serialisation.

One module per job: ``ir`` (the data structures), ``printer`` (text), ``verify`` (the
invariants), ``interpret`` (the reference executor), ``infer`` (re-typing for new input
shapes), ``serialize`` (JSON + safetensors files) and ``dot`` (Graphviz).
"""
from .dot import to_dot
from .infer import eval_dim, infer_shapes
from .interpret import interpret
from .ir import Graph, GraphError, Node, Value, parse_dim, subgraphs, type_str
from .printer import format_graph, format_node
from .serialize import GraphFormatError, constants_path, load, save
from .verify import verify

__all__ = ["Graph", "Node", "Value", "GraphError", "GraphFormatError", "verify", "interpret",
           "infer_shapes", "load", "save", "constants_path", "to_dot", "format_graph",
           "format_node", "subgraphs", "type_str", "parse_dim", "eval_dim"]
