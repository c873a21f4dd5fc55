"""Self-tests of a target's robustness: the hostile requests every good OpenAI-compatible server answers cleanly
(cases.py). Importable without torch, so a command or a gateway test can use it against any target."""

# The families of generated abnormal cases (abnormal.py names each case FAMILY/...). Here, not in abnormal.py, so the
# fault that sends them can name them without importing the case generators into every run's start-up.
ABNORMAL_FAMILIES = ("blns", "special", "special-mix", "repeat", "context", "empty", "injection")
