"""TensorBoard and W&B trackers (issue 23), read back with their own readers, and a failing
tracker that warns once and never stops training. One shared training (conftest
``tracked_run``: MLflow, TensorBoard, W&B offline and a broken tracker together)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest


def _event_losses(run_dir: Path) -> dict[int, float]:
    """``events.jsonl``'s step losses: the curve every tracker must show."""
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["type"] == "step"}


def test_tensorboard_reader_finds_the_loss_curve_config_and_hparams(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = tracked_run.run_dir / "tensorboard"
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    losses = _event_losses(tracked_run.run_dir)
    curve = {e.step: e.value for e in events.Scalars("train/loss")}
    assert len(curve) == len(losses) >= 3
    assert curve == pytest.approx(losses, rel=1e-6)
    scalars = set(events.Tags()["scalars"])
    assert {"train/learning_rate", "validation/accuracy", "validation/loss", "efficiency/mfu",
            "efficiency/throughput_samples_per_s", "efficiency/peak_memory_bytes",
            "final/test.accuracy"} <= scalars
    metrics = json.loads((tracked_run.run_dir / "metrics.json").read_text())
    (final,) = events.Scalars("final/test.accuracy")
    assert final.value == pytest.approx(metrics["test"]["accuracy"])
    (text,) = events.Tensors("config/text_summary")
    assert "max_epochs: 1" in text.tensor_proto.string_val[0].decode()
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = events.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]).session_start_info
    assert session.hparams["train.learning_rate"].number_value == pytest.approx(1e-3)
    assert session.hparams["task"].string_value == "text-classification"


def _wandb_records(path: Path):
    """The records of a W&B ``.wandb`` file: LevelDB's log format (32 KiB blocks; records of
    a 7-byte header: CRC-32C, length, type FULL/FIRST/MIDDLE/LAST) after W&B's 7-byte file
    header (``:W&B``, magic, version), each a ``wandb_internal_pb2.Record``. (W&B's Python
    reader of this file left the package when its core moved to Go.)"""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, pending = 32768, 7, b""
    while position + 7 <= len(data):
        room = block - position % block
        if room < 7:
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0 and length == 0:  # zero padding to the end of the block
            position += room
            continue
        chunk = data[position + 7:position + 7 + length]
        position += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def _key(item) -> str:
    """An item's name: ``key``, or its ``nested_key`` parts joined (W&B uses either)."""
    return item.key or ".".join(item.nested_key)


def test_wandb_offline_folder_holds_the_loss_curve_and_final_metrics(tracked_run):
    if not tracked_run.wandb:
        pytest.skip("wandb is not installed (pip install 'entrena[wandb]')")
    (path,) = (tracked_run.run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    history, summary, config = {}, {}, {}
    for record in _wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {_key(i): json.loads(i.value_json) for i in record.history.item}
            if "train.loss" in items:
                history[items["_step"]] = items["train.loss"]
        elif kind == "summary":
            summary.update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "run":  # the run record carries the config
            config.update({_key(i): json.loads(i.value_json) for i in record.run.config.update})
    losses = _event_losses(tracked_run.run_dir)
    assert len(history) == len(losses) >= 3
    assert history == pytest.approx(losses, rel=1e-6)
    metrics = json.loads((tracked_run.run_dir / "metrics.json").read_text())
    assert summary["test.accuracy"] == pytest.approx(metrics["test"]["accuracy"])
    assert config["train"]["max_epochs"] == 1


def test_a_failing_tracker_warns_once_and_the_others_and_training_go_on(tracked_run):
    broken = [m for m in tracked_run.warnings if m.startswith("tracker 'broken'")]
    assert broken == ["tracker 'broken' off: on_batch_end failed (OSError: disk gone); "
                      "training goes on"]  # and its finish was never called
    assert json.loads((tracked_run.run_dir / "status.json").read_text())["status"] == "finished"
    assert not [m for m in tracked_run.warnings if "off:" in m and "broken" not in m]


def test_guard_keeps_the_class_and_the_checkpoint_state():
    from entrena.tracking.base import guard
    from entrena.tracking.tensorboard_tracker import TensorBoardTracker
    from entrena.tracking.wandb_tracker import WandbTracker

    tracker = guard(WandbTracker(Path("."), "p", "r"), "wandb")
    tracker.load_state_dict({"run_id": "abc"})
    assert type(tracker) is WandbTracker and tracker.state_dict() == {"run_id": "abc"}

    class Faulty(TensorBoardTracker):
        def state_dict(self):
            raise RuntimeError("no state")

    faulty = guard(Faulty(Path(".")), "tensorboard")
    assert faulty.state_dict() == {}  # a checkpoint is still written
    assert faulty.on_eval_end(None) is None  # off: later calls do nothing


def test_the_new_backends_are_known_names():
    from entrena.errors import ConfigError
    from entrena.tracking.base import check_trackers

    check_trackers(["mlflow", "tensorboard", "wandb"])
    with pytest.raises(ConfigError, match="unknown tracker 'tensorbord'; choose from mlflow, "
                                          "tensorboard, wandb; did you mean 'tensorboard'"):
        check_trackers(["tensorbord"])
