"""Reporting: the run's self-contained HTML report, built from its run directory."""

from entrena.reporting.html import OPTIONAL_SECTIONS, SECTIONS, build_report, read_events

__all__ = ["OPTIONAL_SECTIONS", "SECTIONS", "build_report", "read_events"]
