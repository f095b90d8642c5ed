"""After the fit, the validation metrics come from the fit's last evaluation when the model
holds the weights that evaluation saw; otherwise the validation split is predicted again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import build_config
from entrena.api import train


def _counted_train(config: dict, config_file, monkeypatch) -> tuple[dict, list[str]]:
    import entrena.recipes.training as training

    passes: list[str] = []
    real = training.predict

    def counting(backend, model, source, loss):
        passes.append(source)
        return real(backend, model, source, loss)

    monkeypatch.setattr(training, "predict", counting)
    run_dir = Path(train(config_file(config)).run_dir)
    return json.loads((run_dir / "metrics.json").read_text()), passes


def test_the_last_evaluation_is_reused_when_it_saw_the_final_weights(tiny_data, config_file,
                                                                      monkeypatch):
    metrics, passes = _counted_train(build_config({"train.evals_per_epoch": 2}), config_file,
                                     monkeypatch)
    history = metrics["history"]
    assert metrics["fit"]["best_step"] == history[-1]["step"] == metrics["fit"]["steps"]
    # one pass per evaluation in the fit, then the test split's: none for the validation again
    assert len(passes) == len(history) + 1
    assert metrics["validation"]["loss"] == history[-1]["loss"]
    assert metrics["validation"]["accuracy"] == history[-1]["accuracy"]


def test_restored_earlier_weights_are_evaluated_again(tiny_data, config_file, monkeypatch):
    # "best" = the highest validation loss: the first evaluation, before training lowered it
    config = build_config({"train.evals_per_epoch": 2, "train.early_stopping.mode": "max",
                           "train.early_stopping.patience": 10})
    metrics, passes = _counted_train(config, config_file, monkeypatch)
    history = metrics["history"]
    best = max(history, key=lambda row: row["loss"])
    assert metrics["fit"]["best_step"] == best["step"] < history[-1]["step"]
    assert metrics["fit"]["restored_best_weights"] is True
    assert len(passes) == len(history) + 2  # the validation predicted again, then the test
    assert metrics["validation"]["loss"] == pytest.approx(best["loss"], rel=1e-6)
