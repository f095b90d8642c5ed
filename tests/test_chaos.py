"""CI's version of the chaos benchmark: 3 SIGKILLs and 1 SIGTERM during the tiny example run,
and 2 SIGTERMs outside its fit (see benchmarks/chaos.py; `--kills 20` gives the figures in
docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_killed_runs_always_resume_exactly(reviews_data):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--kills", "3",
                           "--signals", "1", "--phase-signals", "2", "--no-write", "--json"],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert result["failures"] == [] and result["identical"]
    records = result["records"]
    assert result["kills"] == 3 and result["signals"] == 1
    assert result["phase_signals"] >= 1  # the last one may come after the run finished
    assert all(r["unreadable"] == 0 for r in records)
    assert records[-1]["kind"] == "finish" and records[-1]["exit_code"] == 0
    restarts = records[1:]
    # every restart after a checkpoint existed resumed from the newest one
    for before, after in zip(records, restarts, strict=False):
        if before["newest_checkpoint"] is not None:
            assert after["resumed_from"] == before["newest_checkpoint"]
    term = next(r for r in records if r["kind"] == "term")
    assert term["exit_code"] == 143 and 0 <= term["signal_to_saved_s"] < 60
