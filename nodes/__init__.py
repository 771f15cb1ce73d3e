"""The MAI graph's nodes, one module each (installed as ``mai_graph.nodes``)."""
