"""The PyTorch profiler / Kineto Chrome-trace reader (registers format ``kineto``).

``reader`` builds the canonical tables; ``decode`` is the msgspec decoder and the column types
both decoders fill; ``cscan`` wraps the optional C scanner ``_kscan`` (compiled by ``pip install``).
"""

from asaptrace.ingest.kineto.reader import KINETO, c_scanner_enabled, read_kineto

__all__ = ["KINETO", "c_scanner_enabled", "read_kineto"]
