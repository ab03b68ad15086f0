"""The Ascend torch_npu / msprof reader (registers format ``ascend``).

``reader`` reads a rank's timeline and groups a rank folder into one source; ``companions`` finds
and reads ``kernel_details.csv`` / ``communication.json``; ``merge`` folds them into the timeline;
``links`` binds launches to device tasks through the profiler's flow arrows.
"""

from asaptrace.ingest.ascend.reader import ASCEND, ascend_sources, read_ascend

__all__ = ["ASCEND", "ascend_sources", "read_ascend"]
