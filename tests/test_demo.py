"""The main job end to end: `make demo`'s command on the real reviews reaches its target.

Slow (about 6 minutes on 2 CPU cores): deselected by default, run by CI through `make test-slow`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_reaches_target_accuracy(tmp_path: Path) -> None:
    data = ROOT / "examples" / "reviews" / "data" / "train.csv"
    if not data.is_file():
        subprocess.run([sys.executable, str(ROOT / "examples" / "reviews" / "prepare_data.py")],
                       check=True)
    entrena = Path(sys.executable).with_name("entrena")
    run_dir = tmp_path / "reviews"
    command = [str(entrena), "train", str(ROOT / "examples" / "reviews" / "config.yaml"),
               "--run-dir", str(run_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test"]["accuracy"] >= 0.85, metrics["test"]
    assert metrics["data"]["test_rows"] == 1000
    report = json.loads((run_dir / "data_report.json").read_text())
    assert report["splits"]["train"]["exact_duplicates"] == 20  # the reviews' real copies
    assert report["splits"]["test"]["leaked_rows"] == 7  # test reviews also in training
    assert report["splits"]["train"]["rows_removed"]["leakage"] == 7

    again = subprocess.run(command, capture_output=True, text=True, check=False)
    assert again.returncode == 0
    assert "already finished" in " ".join(again.stderr.split())  # Rich wraps long paths
