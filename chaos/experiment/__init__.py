"""Experiment and target files: the published JSON Schema, loading with file:line errors, the model."""
