"""The parse stage: read a log, normalise its lines, find OOM events and their context. It never decides."""

from oomdoctor.parse.events import parse_files, parse_lines, parse_regions, parse_text
from oomdoctor.parse.model import OOMEvent, ParseResult

__all__ = ["OOMEvent", "ParseResult", "parse_files", "parse_lines", "parse_regions", "parse_text"]
