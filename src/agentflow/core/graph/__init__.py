"""Structured workflows as graphs: nodes, the links between their ports, the rules a graph
must pass to be published, and the node kinds described for builders."""
