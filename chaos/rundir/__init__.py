"""The run folder's contract, the one layer every package that writes or reads a run shares: its file names
(files.py), the journal and its event names (journal.py), the keys of its server metrics (metrics.py), and the
mark each of a run's processes carries with how to find and stop them afterwards (procs.py).

chaos.run writes a run folder through it; the reports, `chaos recover`, the load's replay and the self-tests read
one through it, and none of them imports chaos.run. It imports nothing of the toolkit but chaos.common.
"""
