"""Tracer, metrics and replay."""
