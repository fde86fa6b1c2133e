"""The mind of a Golem: affect, memory, retrieval and cognition. Knows nothing of SimPy or files."""
