"""A production log replayed as load: options (opts.py), the log read as the load's requests (log.py), the Locust
side that sends them on time (player.py), the run's share of a replay (run.py), its notes and summary (notes.py,
summary.py). The log formats, scrubbing and filters themselves are chaos.replay's; `chaos replay` is
chaos/plan/replaycli.py."""
