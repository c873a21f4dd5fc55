"""The request record: the contract between the load that writes it and the verifier and reports that read it.

record.py is the record and its reading, summary.py the seed's per-step table over records, labels.py which fault
of an LLM proxy each request met. Nothing here imports the load generator: analysing a run needs only this.
"""

from .record import ERROR_OUTCOMES, OUTCOMES, RECORD_VERSION, RequestRecord, read_new_records, read_records

__all__ = ["ERROR_OUTCOMES", "OUTCOMES", "RECORD_VERSION", "RequestRecord", "read_new_records", "read_records"]
