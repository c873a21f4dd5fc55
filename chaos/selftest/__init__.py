"""Self-tests of a target's robustness: the hostile requests every good OpenAI-compatible server answers cleanly
(cases.py). Importable without torch, so a command or a gateway test can use it against any target."""
