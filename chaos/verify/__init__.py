"""Checks of what the target did: steady state, error budgets, recovery time, SLOs, status codes."""
