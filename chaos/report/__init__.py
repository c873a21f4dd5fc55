"""Run reports: report.json for machines, report.md with the seed's tables for people."""
