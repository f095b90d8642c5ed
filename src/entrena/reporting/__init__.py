"""Reporting: the run's self-contained HTML report, built from its run directory."""

from entrena.reporting.html import SECTIONS, build_report, read_events

__all__ = ["SECTIONS", "build_report", "read_events"]
