"""Short-term window, long-term facts, semantic memory and hybrid retrieval logic."""
