"""The names of what a run folder holds: every package that writes or reads one takes them from here.

The journal (journal.jsonl) is the single record of a run; requests.jsonl holds one line a request; the reports
are rendered from these two and may be rendered again (`chaos report RUN_DIR`).
"""

JOURNAL = "journal.jsonl"  # events, fsynced one by one (chaos.rundir.journal)
REQUESTS = "requests.jsonl"  # one line a request (chaos.records)
RESOLVED = "experiment.resolved.json"  # the experiment as it ran: variables substituted, secrets masked
REPORT_JSON = "report.json"  # the report's data (its schema: chaos/report/schema.py)
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
JUNIT = "junit.xml"
METRICS_FILE = "metrics.jsonl"  # the servers' /metrics through the run (keys: chaos.rundir.metrics)
PROMETHEUS_TARGETS = "prometheus-targets.json"  # file_sd targets for a Prometheus of the user's own
REPLAY_SUMMARY = "replay-summary.json"  # what a replayed log held and what was sent
