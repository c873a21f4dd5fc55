"""The run lifecycle: target up, steady-state gate, faults on schedule under load, verify, rollback, report."""
