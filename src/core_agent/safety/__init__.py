"""Policy engine, risk grading, approval flow and injection checks."""
