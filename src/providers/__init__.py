"""Adapters to the outside world; each implements ports from ``core_agent.contracts``."""
