"""Files entrena writes through a temporary file get the mode a plain open() would give."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from entrena.core.files import write_atomic, write_json_atomic
from entrena.data.streaming import TableWriter


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_atomic_writes_follow_the_umask_not_mkstemps_0600(tmp_path: Path) -> None:
    """report.html, status.json, checkpoints and model/model.safetensors were 0600."""
    write_json_atomic(tmp_path / "status.json", {"status": "finished"})
    write_atomic(tmp_path / "model.bin", lambda handle: handle.write(b"weights"))
    for name in ("status.json", "model.bin"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~_umask(), name


def test_a_predict_output_follows_the_umask(tmp_path: Path) -> None:
    writer = TableWriter(tmp_path / "out.csv")
    writer.write(pd.DataFrame({"text": ["a"], "predicted_label": ["x"]}))
    writer.close()
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o666 & ~_umask()
