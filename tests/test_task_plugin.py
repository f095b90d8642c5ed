"""A task from outside the package, found through the ``entrena.tasks`` entry point, runs
``train``, ``export`` and ``predict`` through the CLI: no verb names a task.

The task is ``tests/plugins/entrena_toy.py``; the test installs it the way pip would, as a
``*.dist-info`` folder with ``entry_points.txt`` on the subprocess's ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, run_cli

PLUGINS = ROOT / "tests" / "plugins"


def _points(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-1, 1, size=(n, 2))
    return pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1],
                         "side": np.where(xy[:, 0] > 0, "right", "left")})


@pytest.fixture
def plugin_project(tmp_path):
    site = tmp_path / "site"
    info = site / "entrena_toy-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: entrena-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[entrena.tasks]\ntoy-points = entrena_toy:ToyPointsTask\n")
    _points(300, 1).to_csv(tmp_path / "train.csv", index=False)
    _points(80, 2).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "config.yaml").write_text(
        "name: toy\ntask: toy-points\n"
        "data:\n  train: train.csv\n  test: test.csv\n  label_column: side\n"
        "model:\n  hidden_size: 8\n"
        "train:\n  max_epochs: 8\n  batch_size: 16\n  learning_rate: 0.03\n"
        "tracking:\n  enabled: false\n")
    path = os.pathsep.join([str(PLUGINS), str(site), os.environ.get("PYTHONPATH", "")])
    return tmp_path, {"PYTHONPATH": path.rstrip(os.pathsep)}


def test_a_task_from_an_entry_point_trains_exports_and_predicts(plugin_project):
    project, env = plugin_project
    trained = run_cli("train", "config.yaml", cwd=project, **env)
    assert trained.returncode == 0, trained.stderr
    run = project / "runs" / "toy"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["test"]["accuracy"] >= 0.9  # x > 0 is one line: a learnt MLP finds it
    assert metrics["baseline"]["majority"]["test"]["accuracy"] < 0.75
    assert (run / "model" / "toy.pt").is_file() and (run / "plan.json").is_file()

    exported = run_cli("export", run, "--json", "--latency-calls", "3", cwd=project, **env)
    assert exported.returncode == 0, exported.stderr
    report = json.loads(exported.stdout)
    assert report["task"] == "toy-points" and report["parity"]["passed"]

    _points(20, 3).drop(columns="side").to_csv(project / "new.csv", index=False)
    for source in (run, run / "export" / "onnx"):
        out = project / f"out-{source.name}.csv"
        predicted = run_cli("predict", source, "-i", "new.csv", "-o", out, "--json",
                            cwd=project, **env)
        assert predicted.returncode == 0, predicted.stderr
        frame = pd.read_csv(out)
        truth = np.where(pd.read_csv(project / "new.csv")["x"] > 0, "right", "left")
        assert (frame["predicted_label"] == truth).mean() >= 0.9
        assert set(frame.columns) >= {"prob_left", "prob_right", "status"}


def test_the_plugin_refuses_a_predict_input_without_its_columns(plugin_project):
    project, env = plugin_project
    assert run_cli("train", "config.yaml", "--set", "train.max_epochs=1", cwd=project,
                   **env).returncode == 0
    pd.DataFrame({"x": [0.5]}).to_csv(project / "bad.csv", index=False)
    done = run_cli("predict", project / "runs" / "toy", "-i", "bad.csv", "-o", "out.csv",
                   cwd=project, **env)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("bad.csv: no column(s) y; the model reads x, y")
    assert not (project / "out.csv").exists()


def test_a_config_naming_the_plugin_keys_is_validated_by_its_class(plugin_project):
    project, env = plugin_project
    bad = project / "bad.yaml"
    bad.write_text((project / "config.yaml").read_text().replace("hidden_size: 8",
                                                                 "hidden_sise: 8"))
    done = run_cli("plan", bad, "--local-only", cwd=project, **env)
    assert done.returncode == 2
    assert f"{bad}:8: unknown key 'model.hidden_sise'; did you mean 'model.hidden_size'?" \
        in done.stderr
