"""Source-format ingesters. Importing this package registers the built-in formats.

Each format is a sub-package that registers a :class:`~asaptrace.ingest.base.Format` declaring its
detection priority, how it groups files into one source and how a rank is read from a path; the
driver asks the registry only, so import order does not matter.
"""

from asaptrace.ingest import ascend, kineto, nsys  # noqa: F401  (register the built-in formats)
from asaptrace.ingest.base import FORMATS, Format, IngestOptions, IngestResult, detect_format, register_format

__all__ = ["FORMATS", "Format", "IngestOptions", "IngestResult", "detect_format", "register_format"]
