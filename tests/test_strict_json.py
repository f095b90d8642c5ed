"""Every JSON file a run writes is strict JSON (RFC 8259): a NaN or infinite value is written
as ``null`` and listed under ``nonfinite_values``, never as a bare ``NaN``/``Infinity`` token."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from rich.console import Console

import entrena
from conftest import build_config, review_rows, write_csv
from entrena.core.files import NONFINITE_KEY, dumps_strict, write_json_atomic
from test_resume import PoisonGradient  # a NaN gradient at one step, the loss finite


def strict_loads(text: str):
    def refuse(token: str):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_strict_writes_null_and_lists_what_it_replaced():
    data = {"loss": float("nan"), "history": [{"loss": 1.0}, {"loss": float("inf")}],
            "fit": {"low": -math.inf, "ok": 2.5, "count": 3, "flag": True, "none": None},
            "f32": np.float32("nan")}
    text = dumps_strict(data)
    parsed = strict_loads(text)
    assert parsed["loss"] is None and parsed["history"][1]["loss"] is None
    assert parsed["fit"] == {"low": None, "ok": 2.5, "count": 3, "flag": True, "none": None}
    assert parsed[NONFINITE_KEY] == {"loss": "NaN", "history[1].loss": "Infinity",
                                     "fit.low": "-Infinity", "f32": "NaN"}
    assert strict_loads(dumps_strict({"a": 1})) == {"a": 1}  # nothing to flag, no flag
    assert strict_loads(dumps_strict([float("nan")])) == [None]


def test_write_json_atomic_is_strict(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"grad_norm": float("nan")})
    assert strict_loads((tmp_path / "x.json").read_text()) == {
        "grad_norm": None, NONFINITE_KEY: {"grad_norm": "NaN"}}


def test_every_json_file_of_a_run_and_its_export_parses_strictly(tmp_path):
    data = tmp_path / "data"
    write_csv(data / "train.csv", review_rows(96, seed=1))
    write_csv(data / "test.csv", review_rows(32, seed=2))
    config = build_config({"train.on_nonfinite": "skip_batch", "train.log_every_steps": 1,
                           "train.max_epochs": 1})
    run_dir = tmp_path / "run"
    entrena.train(config, run_dir=run_dir, callbacks=[PoisonGradient(3)],
                  console=Console(file=io.StringIO()))
    entrena.export(run_dir, latency_calls=1)
    files = sorted(p for p in run_dir.rglob("*") if p.suffix in (".json", ".jsonl"))
    names = {p.name for p in files}
    assert {"metrics.json", "events.jsonl", "data_report.json", "status.json", "plan.json",
            "latest.json", "export.json"} <= names
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for line in lines:
            try:
                strict_loads(line)
            except ValueError as exc:
                pytest.fail(f"{path.relative_to(run_dir)}: {exc}")
    events = [strict_loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    bad = [e for e in events if e["type"] == "nonfinite"]
    assert len(bad) == 1 and bad[0]["grad_norm"] is None
    assert bad[0][NONFINITE_KEY] == {"grad_norm": "NaN"}
