"""Embedders: offline feature hashing, any litellm embedding API, local model2vec models."""
