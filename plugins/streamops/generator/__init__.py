"""Replayable-source generator: JSON-lines input files for streaming Spark stages.

    from streamops.generator import generate, parse_trace
    generate(out_dir, "web", parse_trace("ramp:start_rate=200,doubling_s=500"), seed=1, duration_s=600)
"""

from .manifest import read_manifest, read_valid_records
from .records import KINDS, REQUIRED_FIELDS, SCHEMAS, garbage_line, kind_for, make_records, parse_valid, taxi_cell
from .samples import make_schema_records, sample_lines
from .topic import produce as produce_to_topic
from .traces import TRACE_KINDS, Trace, TraceSpec, make_trace, parse_trace
from .writer import GenerateSummary, Generator, generate

__all__ = [
    "KINDS",
    "REQUIRED_FIELDS",
    "SCHEMAS",
    "TRACE_KINDS",
    "GenerateSummary",
    "Generator",
    "Trace",
    "TraceSpec",
    "garbage_line",
    "generate",
    "kind_for",
    "make_records",
    "make_schema_records",
    "make_trace",
    "parse_trace",
    "parse_valid",
    "produce_to_topic",
    "read_manifest",
    "read_valid_records",
    "sample_lines",
    "taxi_cell",
]
