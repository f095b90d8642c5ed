"""A diverged run never ships: the divergence guard (a loss far above its running median stops
the run before that update is kept, back at the last sane state), `skip_batch` giving up, the
advised resume with a lower learning rate, and `predict`/`export` refusing a model whose
outputs are not finite. Tiny BERT on 96 generated rows, on CPU."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file, save_file

import entrena
from conftest import build_config, review_rows, write_csv
from entrena.engine.checkpointing import CheckpointStore
from entrena.engine.guard import StepUndo, divergence_threshold, gives_up, record_loss
from entrena.errors import ModelError, NonFiniteError


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """96 training and 32 test rows (as test_resume.py's), shared by the module's runs."""
    directory = tmp_path_factory.mktemp("divergence-data")
    write_csv(directory / "train.csv", review_rows(96, seed=1))
    write_csv(directory / "test.csv", review_rows(32, seed=2))
    return directory


def make_config(data_dir: Path, **overrides):
    return build_config(overrides, train=str(data_dir / "train.csv"),
                        test=str(data_dir / "test.csv"))


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


# --- the pure pieces -----------------------------------------------------------------------

def test_divergence_threshold_is_factor_times_the_larger_median():
    assert divergence_threshold([], [], 10.0) is None
    assert divergence_threshold([0.6], [0.6], None) is None
    assert divergence_threshold([0.6], [0.6], 10.0) == pytest.approx(6.0)
    # A loss that fell near zero is measured against the fit's first steps, not 10 x 0.01.
    assert divergence_threshold([0.01, 0.02, 0.01], [0.7, 0.6, 0.65], 10.0) == pytest.approx(6.5)
    assert divergence_threshold([3.0, 2.0, 4.0], [0.7], 10.0) == pytest.approx(30.0)
    assert divergence_threshold([0.0], [0.0], 10.0) is None  # no scale: no guard


def test_record_loss_keeps_a_window_and_the_first_steps():
    recent: list[float] = []
    first: list[float] = []
    for value in [*range(1, 31), float("nan")]:
        record_loss(recent, first, float(value))
    assert recent == [float(v) for v in range(11, 31)]
    assert first == [float(v) for v in range(1, 21)]


def test_skip_batch_gives_up_on_a_share_and_never_on_one_bad_batch():
    assert not gives_up(1, 1, 0.05) and not gives_up(2, 2, 0.05)
    assert gives_up(3, 4, 0.05)
    assert not gives_up(3, 1000, 0.05) and gives_up(51, 1000, 0.05)


def test_step_undo_puts_back_weights_and_optimizer_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)

    def step() -> None:
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    undo = StepUndo(model, optimizer)
    assert not undo.taken
    initial = [p.detach().clone() for p in model.parameters()]
    undo.take({"step": 0})
    step()
    assert undo.restore() == {"step": 0}
    assert all(torch.equal(a, b) for a, b in zip(initial, model.parameters(), strict=True))
    assert not optimizer.state  # before the first step there was no optimizer state

    step()
    kept = {k: v.clone() for k, v in optimizer.state[model.weight].items()}
    weights = model.weight.detach().clone()
    undo.take({"step": 1})
    step()
    undo.restore()
    assert torch.equal(model.weight, weights)
    assert all(torch.equal(v, optimizer.state[model.weight][k]) for k, v in kept.items())


# --- end to end ----------------------------------------------------------------------------

def test_a_huge_learning_rate_stops_at_the_last_sane_state_and_the_advice_works(data_dir,
                                                                               tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as raised:
        entrena.train(make_config(data_dir, **{"train.learning_rate": 1e6}), run_dir=run_dir,
                      console=quiet())
    message = str(raised.value)
    # Step 1's loss was sane (~0.7); the update it made sent step 2's loss to ~1e11: that
    # update is undone, so the state kept is step 0's, not the broken step 1.
    assert message.startswith("diverged loss (")
    assert "x its running median) at step 2 (epoch 1), caught before the weights changed; " \
           "the last good state (step 0) is in " in message
    assert "(the step before gave this loss, so it was undone)" in message
    assert "lower train.learning_rate (now 1e+06)" in message and "--resume-with-changes" in message
    latest = CheckpointStore(run_dir / "checkpoints").latest_readable()
    assert (latest.step, latest.reason) == (0, "nonfinite")
    report = json.loads((run_dir / "nonfinite_batch.json").read_text())
    assert (report["reason"], report["step"], report["resume_step"]) == ("diverged", 2, 0)
    assert report["loss"] > 1e6 > report["loss_limit"] > 0
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    assert not (run_dir / "model").exists() and not (run_dir / "metrics.json").exists()

    # The advice: a lower learning rate, resumed with --resume-with-changes, completes, and
    # trains at the new rate (not the checkpoint's 1e6).
    result = entrena.train(make_config(data_dir, **{"train.learning_rate": 1e-3}),
                           run_dir=run_dir, resume_with_changes=True, console=quiet())
    assert result.resumed_from_step == 0 and result.metrics["fit"]["steps"] == 20
    assert result.metrics["validation"]["loss"] < 1.0
    records = events(run_dir)
    resumed_at = max(i for i, e in enumerate(records) if e["type"] == "fit_start")
    rates = [e["learning_rate"] for e in records[resumed_at:] if e["type"] == "step"]
    assert rates and max(rates) <= 1e-3
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"


def test_skip_batch_gives_up_instead_of_shipping_a_broken_model(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as raised:
        entrena.train(make_config(data_dir, **{"train.learning_rate": 1e6,
                                              "train.on_nonfinite": "skip_batch"}),
                      run_dir=run_dir, console=quiet())
    message = str(raised.value)
    assert ("; train.on_nonfinite: skip_batch gave up after skipping 3 of 4 steps (more than "
            "train.max_skipped_fraction 0.05); the last good state (step 0) is in ") in message
    assert "or set train.on_nonfinite: skip_batch" not in message
    actions = [e["action"] for e in events(run_dir) if e["type"] == "nonfinite"]
    assert actions == ["skip_batch", "skip_batch", "stop"]
    assert not (run_dir / "model").exists()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"


def test_a_non_finite_final_model_is_never_finished_nor_saved(data_dir, tmp_path):
    # Every guard off: the weights go non-finite and every later step is skipped.
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as raised:
        entrena.train(make_config(data_dir, **{"train.learning_rate": 1e6,
                                              "train.on_nonfinite": "skip_batch",
                                              "train.divergence_factor": None,
                                              "train.max_skipped_fraction": 1.0}),
                      run_dir=run_dir, console=quiet())
    message = str(raised.value)
    assert "so no model was saved and the run is not finished" in message
    assert "steps were skipped for a non-finite or diverged loss" in message
    assert not (run_dir / "model").exists() and not (run_dir / "metrics.json").exists()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"


@pytest.fixture(scope="module")
def broken_run(data_dir, tmp_path_factory) -> Path:
    """A finished tiny run whose saved weights were then overwritten with NaN (a model from
    before the guard, or damaged on disk)."""
    run_dir = tmp_path_factory.mktemp("broken") / "run"
    entrena.train(make_config(data_dir, **{"train.max_epochs": 1}), run_dir=run_dir,
                  console=quiet())
    weights = run_dir / "model" / "model.safetensors"
    tensors = load_file(str(weights))
    save_file({k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
               for k, v in tensors.items()}, str(weights))
    return run_dir


def test_predict_refuses_a_model_whose_outputs_are_not_finite(broken_run, data_dir, tmp_path):
    output = tmp_path / "out.csv"
    with pytest.raises(ModelError) as raised:
        entrena.predict(broken_run, data_dir / "test.csv", output=output, progress=False)
    assert str(raised.value) == (
        f"{broken_run}: the model outputs NaN values for 32 of 32 input rows, so its labels "
        "and probabilities mean nothing; its weights are broken (a diverged run): train it "
        "again with a lower train.learning_rate (entrena train CONFIG --restart)")
    assert raised.value.exit_code == 2
    assert not output.exists()


def test_export_refuses_a_model_whose_outputs_are_not_finite(broken_run):
    with pytest.raises(ModelError) as raised:
        entrena.export(broken_run, latency_calls=1)
    assert str(raised.value).startswith(
        f"{broken_run / 'model'}: the model outputs NaN values for 32 of 32 parity texts (")
    assert not (broken_run / "export").exists()


def test_a_skipped_diverged_step_is_one_readable_warning(data_dir, tmp_path, caplog):
    with pytest.raises(NonFiniteError):
        entrena.train(make_config(data_dir, **{"train.learning_rate": 1e6,
                                              "train.on_nonfinite": "skip_batch"}),
                      run_dir=tmp_path / "run", console=quiet())
    skipped = [r.getMessage() for r in caplog.records if "skipped step" in r.getMessage()]
    assert len(skipped) == 2
    pattern = (r"skipped step 2 \(epoch 1\): loss \d\.\d+e\+1\d above \d\.\d+ \(diverged\); "
               r"example indices \[\d+(, \d+){7}\]")
    assert all(re.fullmatch(pattern, m) for m in skipped), skipped


def test_a_regression_step_is_judged_against_predicting_the_mean_on_its_rows():
    """Issue 42: the guard's floor is the batch's own 'predict the training mean' loss (the
    standardised targets' mean square), so one large, legitimate target is not divergence;
    class labels and tags give no floor."""
    import numpy as np

    from entrena.data.batching import reference_loss

    assert divergence_threshold([0.5], [0.6], 10.0, floor=14.0) == pytest.approx(140.0)
    assert divergence_threshold([0.5], [0.6], 10.0, floor=0.1) == pytest.approx(6.0)
    assert divergence_threshold([0.5], [0.6], 10.0, floor=float("nan")) == pytest.approx(6.0)
    assert divergence_threshold([0.5], [0.6], None, floor=14.0) is None
    z = np.array([0.5, -1.0, 12.0, 0.0], dtype=np.float32)
    assert reference_loss(z, [0, 1, 2]) == pytest.approx((0.25 + 1.0 + 144.0) / 3)
    assert reference_loss(z, []) is None
    assert reference_loss(np.array([0, 1, 2]), [0, 1]) is None  # class indices
    assert reference_loss(np.zeros((3, 2), dtype=np.float32), [0, 1]) is None  # tags
