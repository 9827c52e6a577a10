"""The Executable: a graph made ready to run many times.

This version runs the reference interpreter; the optimising code generator (readable
Python over preallocated buffers plus fused Numba kernels) replaces ``run`` behind the same
interface, so capture and the tests don't change when it lands.
"""
from __future__ import annotations

from ..graph import Graph
from ..graph.interpret import interpret


class Executable:
    def __init__(self, graph: Graph):
        self.graph = graph

    def run(self, arrays, on_node=None) -> list:
        return interpret(self.graph, *arrays, on_node=on_node)

    @property
    def code(self) -> str:
        """The program that runs: for the interpreter, the graph itself."""
        return "# executed by the reference interpreter\n" + str(self.graph)
