"""The Nsight Systems SQLite export reader (registers format ``nsys``); ``schema`` probes the export."""

from asaptrace.ingest.nsys.reader import NSYS, read_nsys

__all__ = ["NSYS", "read_nsys"]
