"""Checkpoint files: atomic writes, completion markers, verification, fallback, retention,
disk full, RNG states, and the config fingerprint that guards a resume."""

from __future__ import annotations

import errno
import json
import random
from collections import namedtuple

import numpy as np
import pytest
import torch

from entrena.config.fingerprint import config_changes, config_hash, format_changes
from entrena.engine import checkpointing
from entrena.engine.checkpointing import POINTER, CheckpointStore, capture_rng, restore_rng
from entrena.errors import ResourceError
from entrena.tasks.registry import load_config


def payload(step: int, size: int = 1000) -> dict:
    return {"model": {"w": torch.full((size,), float(step))}, "counters": {"step": step}}


def meta(step: int, **extra) -> dict:
    return {"step": step, "epoch": step // 10, "batch_in_epoch": step % 10, "reason": "steps",
            "config_hash": "abc", "config": {"name": "x"}, **extra}


def save(store: CheckpointStore, *steps: int, **kwargs) -> None:
    for step in steps:
        store.save(payload(step), meta(step), **kwargs)


def test_save_writes_file_marker_and_pointer(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints")
    info = store.save(payload(7), meta(7))
    assert info.path == tmp_path / "checkpoints" / "step-000007.pt"
    marker = json.loads(info.marker.read_text())
    assert marker["sha256"] == checkpointing.sha256_file(info.path)
    assert marker["bytes"] == info.path.stat().st_size
    assert (marker["step"], marker["epoch"], marker["batch_in_epoch"]) == (7, 0, 7)
    assert marker["config"] == {"name": "x"} and marker["config_hash"] == "abc"
    assert json.loads((tmp_path / "checkpoints" / POINTER).read_text()) == marker
    loaded = store.load(store.latest_readable())
    assert torch.equal(loaded["model"]["w"], torch.full((1000,), 7.0))
    assert sorted(p.name for p in info.path.parent.iterdir()) == [
        "latest.json", "step-000007.json", "step-000007.pt"]  # no temporary files left


def test_newest_complete_checkpoint_wins_and_incomplete_ones_are_ignored(tmp_path):
    store = CheckpointStore(tmp_path)
    save(store, 3, 6)
    # A kill between the .pt rename and its marker leaves a file without a marker; a kill
    # mid-write leaves a temporary file. Neither is a checkpoint, and clean() removes both.
    (tmp_path / "step-000009.pt").write_bytes(b"half")
    (tmp_path / ".step-000012.pt.x1y2.tmp").write_bytes(b"partial")
    assert [i.step for i in store.complete()] == [6, 3]
    assert store.latest_readable().step == 6
    store.clean()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest.json", "step-000003.json", "step-000003.pt", "step-000006.json", "step-000006.pt"]


def test_corrupt_newest_checkpoint_warns_and_falls_back(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    save(store, 3, 6)
    newest = tmp_path / "step-000006.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    newest.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="entrena"):
        info = store.latest_readable()
    assert info.step == 3
    assert "step-000006.pt is unreadable: its SHA-256 does not match" in caplog.text
    assert "using the previous one, step-000003.pt" in caplog.text
    assert (tmp_path / "step-000006.pt.unreadable").is_file()  # kept aside, never tried again
    assert [i.step for i in store.complete()] == [3]


def test_truncated_checkpoint_is_detected_by_its_size(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    save(store, 3, 6)
    newest = tmp_path / "step-000006.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    assert store.latest_readable().step == 3
    assert "has 100 bytes, its marker says" in caplog.text


def test_no_readable_checkpoint_returns_none(tmp_path):
    store = CheckpointStore(tmp_path / "absent")
    assert store.latest_readable() is None and store.complete() == []


def test_retention_keeps_the_newest_and_the_best(tmp_path):
    store = CheckpointStore(tmp_path)
    for step in range(1, 7):
        store.save(payload(step), meta(step), keep_last=2, protect_steps=[2])
    assert [i.step for i in store.complete()] == [6, 5, 2]
    assert not (tmp_path / "step-000001.pt").exists() and not (tmp_path / "step-000003.pt").exists()


def test_retention_never_deletes_best_pt(tmp_path):
    torch.save({"model": {}}, tmp_path / "best.pt")
    store = CheckpointStore(tmp_path)
    for step in range(1, 5):
        store.save(payload(step), meta(step), keep_last=1)
    assert (tmp_path / "best.pt").is_file()
    assert [i.step for i in store.complete()] == [4]


def _fill_disk(payload, handle):
    handle.write(b"x" * 4096)  # some bytes get through, then the disk is full
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_keeps_the_previous_checkpoint_and_says_what_is_needed(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    save(store, 5)
    pointer_before = (tmp_path / POINTER).read_bytes()
    monkeypatch.setattr(checkpointing, "_write_payload", _fill_disk)
    with pytest.raises(ResourceError) as raised:
        store.save(payload(10, size=250_000), meta(10))
    message = str(raised.value)
    assert "disk full while writing checkpoint" in message and "step-000010.pt" in message
    assert "needs about 976.6 KiB (1000000 bytes)" in message  # 250,000 float32 values
    assert "step-000005.pt (step 5), is intact" in message
    assert "run the same command to resume" in message
    # the previous checkpoint is untouched and still verifies; nothing half-written remains
    assert (tmp_path / POINTER).read_bytes() == pointer_before
    assert store.latest_readable().step == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest.json", "step-000005.json", "step-000005.pt"]


def test_disk_full_is_caught_before_writing_when_space_is_known_short(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    save(store, 5)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpointing.shutil, "disk_usage", lambda _: usage(10**9, 10**9, 1024))
    with pytest.raises(ResourceError, match=r"needs about .* and 1.0 KiB are free"):
        store.save(payload(10, size=250_000), meta(10))
    assert [i.step for i in store.complete()] == [5]


def test_other_write_errors_propagate_unchanged(tmp_path, monkeypatch):
    def denied(payload, handle):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(checkpointing, "_write_payload", denied)
    with pytest.raises(PermissionError):
        CheckpointStore(tmp_path).save(payload(1), meta(1))
    assert list(tmp_path.iterdir()) == []


def test_rng_states_round_trip_through_a_checkpoint(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    store = CheckpointStore(tmp_path)
    store.save({"rng": capture_rng()}, meta(1))
    expected = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    restore_rng(store.load(store.latest_readable())["rng"])  # weights_only load works too
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])


# --- the config fingerprint --------------------------------------------------------------

def resolved(**train) -> dict:
    return load_config({"name": "x", "data": {"train": "t.csv"},
                        "train": train}).config.model_dump(mode="json")


def test_result_neutral_keys_do_not_change_the_hash():
    base = config_hash(resolved())
    for neutral in ({"log_every_steps": 1}, {"max_time": "2h"}, {"num_threads": 3},
                    {"checkpoint": {"every_steps": 5, "keep_last": 9, "every_minutes": None}}):
        assert config_hash(resolved(**neutral)) == base, neutral
    renamed = resolved()
    renamed["name"], renamed["tracking"]["enabled"] = "other", False
    assert config_hash(renamed) == base


def test_result_relevant_changes_are_listed():
    old, new = resolved(), resolved(learning_rate=3e-4, on_nonfinite="skip_batch", max_time="1h")
    assert config_hash(old) != config_hash(new)
    changes = config_changes(old, new)
    assert changes == [("train.learning_rate", 1e-4, 3e-4),
                       ("train.on_nonfinite", "stop", "skip_batch")]
    assert format_changes(changes) == ('  train.learning_rate: 0.0001 -> 0.0003\n'
                                       '  train.on_nonfinite: "stop" -> "skip_batch"')
