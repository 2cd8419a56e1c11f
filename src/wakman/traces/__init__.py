"""Traces: one request model, readers and writers for real formats, and trace statistics."""

from wakman.traces.formats import FORMATS, detect_format, read_trace, write_trace
from wakman.traces.model import Request, TraceFormatError

__all__ = ["FORMATS", "Request", "TraceFormatError", "detect_format", "read_trace", "write_trace"]
