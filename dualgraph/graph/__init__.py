"""The IR: Graph, Node, Value, printing, verification, interpretation, serialisation.

One module per job: ``ir`` (the data structures), ``printer`` (text), ``verify`` (the
invariants), ``interpret`` (the reference executor), ``infer`` (re-typing for new input
shapes), ``serialize`` (JSON + safetensors files), ``dot`` (Graphviz) and ``html`` (a
self-contained page to view graphs in a browser).
"""
from .dot import to_dot
from .html import to_html, write_html
from .infer import eval_dim, infer_shapes
from .interpret import interpret
from .ir import Graph, GraphError, Node, Value, parse_dim, subgraphs, type_str
from .printer import format_graph, format_node
from .serialize import GraphFormatError, constants_path, load, save
from .verify import verify

# Node's and Graph's methods that are the other modules' jobs (ir.py imports none of them:
# they import it), bound once all are loaded, as ops/methods.py binds Tensor's.
Node.__repr__ = format_node
Graph.__str__ = format_graph
Graph.verify = verify
Graph.__call__ = interpret
Graph.to_dot = to_dot
Graph.to_html = to_html
Graph.save = save

__all__ = ["Graph", "Node", "Value", "GraphError", "GraphFormatError", "verify", "interpret",
           "infer_shapes", "load", "save", "constants_path", "to_dot", "to_html", "write_html",
           "format_graph", "format_node", "subgraphs", "type_str", "parse_dim", "eval_dim"]
