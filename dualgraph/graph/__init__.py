"""The IR: Graph, Node, Value, printing, verification, interpretation, serialisation."""
