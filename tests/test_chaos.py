"""CI's versions of the chaos benchmark (see benchmarks/chaos.py; `--random 20` and `--kills 20`
give the figures in docs/benchmarks.md): 5 random signals at random phases, and 3 SIGKILLs
and 1 SIGTERM in the fit with 2 SIGTERMs outside it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT


def chaos(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), *args,
                           "--no-write", "--json"],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_random_signals_at_random_phases_always_end_in_a_clean_restart(reviews_data):
    # Seed 1 draws: SIGKILL before the fit, SIGTERM in it, SIGKILL before the fit, SIGKILL in
    # it, SIGTERM after the last step.
    result = chaos("--random", "5", "--seed", "1")
    assert result["failures"] == [] and result["identical"]
    records = result["records"]
    assert [r["kind"] for r in records[:5]] == ["early-kill", "term", "early-kill", "kill",
                                                "late"]
    assert records[-1]["kind"] == "finish" and records[-1]["exit_code"] == 0
    assert result["disruptions"] >= 4  # the late one may come after the run finished
    assert result["clean_restarts"] == len(records) - 1
    assert all(r["unreadable"] == 0 for r in records)
    for before, after in zip(records, records[1:], strict=False):
        if before["status_after"] == "finished":  # stopped after it was marked finished
            assert after["start"] == "already finished"
        elif before["newest_checkpoint"] is not None:
            assert after["resumed_from"] == before["newest_checkpoint"] or (
                after["phase"] == "early" and after["exit_code"] != 0)
        else:  # nothing to resume: a new run, or an unfinished one started over with its line
            assert after["start"] in ("fresh", "started over")


@pytest.mark.slow
def test_killed_runs_always_resume_exactly(reviews_data):
    result = chaos("--kills", "3", "--signals", "1", "--phase-signals", "2")
    assert result["failures"] == [] and result["identical"]
    records = result["records"]
    assert result["fit_kills"] == 3 and result["signals"] == 1
    assert result["phase_signals"] >= 1  # the last one may come after the run finished
    assert all(r["unreadable"] == 0 for r in records)
    assert records[-1]["kind"] == "finish" and records[-1]["exit_code"] == 0
    restarts = records[1:]
    # every restart after a checkpoint existed resumed from the newest one, except one stopped
    # by an early SIGTERM before it got that far (its signal at the process start, CI's stop
    # 29), or one after the late SIGTERM landed once the run was marked finished
    for before, after in zip(records, restarts, strict=False):
        if before["status_after"] == "finished":
            assert after["start"] == "already finished" and after["resumed_from"] is None
        elif before["newest_checkpoint"] is not None:
            assert after["resumed_from"] == before["newest_checkpoint"] or (
                after["phase"] == "early" and after["exit_code"] == 143
                and after["resumed_from"] is None)
    term = next(r for r in records if r["kind"] == "term")
    assert term["exit_code"] == 143 and 0 <= term["signal_to_saved_s"] < 60
