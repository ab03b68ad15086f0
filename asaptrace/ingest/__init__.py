"""Source-format ingesters. Importing this package registers the built-in formats."""

from asaptrace.ingest import ascend  # noqa: F401, I001  (registers; before kineto: detection order)
from asaptrace.ingest import kineto  # noqa: F401  (registers the format)
from asaptrace.ingest import nsys  # noqa: F401  (registers the format)
from asaptrace.ingest.base import FORMATS, Format, IngestOptions, IngestResult, detect_format, register_format

__all__ = ["FORMATS", "Format", "IngestOptions", "IngestResult", "detect_format", "register_format"]
