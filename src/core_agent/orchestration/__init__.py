"""Strategies that run tasks: the ReAct executor (plan-and-execute and routing to come)."""
