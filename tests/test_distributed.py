"""Distributed training through Fabric: DDP over gloo with 2 CPU processes on the tiny config.

The 2-process runs start real processes (``distributed``, deselected by default); one short
comparison is marked ``slow`` as well so that CI (``make test-slow``) runs it.
"""

from __future__ import annotations

import json

import pytest

from conftest import build_config, review_rows, run_cli, write_config, write_csv
from entrena.engine.backend import _check_devices
from entrena.engine.distributed import ShardedBatches, launched_rank
from entrena.errors import ResourceError


class Plan:
    def __init__(self, batches):
        self.batches = batches

    def plan(self, epoch):
        return self.batches

    def collate(self, indices):
        return list(indices)


def test_each_rank_takes_its_share_of_every_global_batch():
    source = Plan([[0, 1, 2, 3], [4, 5, 6, 7], [8]])
    ranks = [ShardedBatches(source, rank, 2).plan(0) for rank in (0, 1)]
    assert ranks == [[[0, 2], [4, 6], [8]], [[1, 3], [5, 7], [8]]]
    assert len(ShardedBatches(source, 1, 2)) == 3


@pytest.mark.parametrize("env, rank", [({}, 0), ({"LOCAL_RANK": "1"}, 1), ({"RANK": "3"}, 3),
                                       ({"RANK": "0", "LOCAL_RANK": "0"}, 0),
                                       ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, 0),
                                       ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, 1)])
def test_the_launched_rank_comes_from_the_launchers_variables(monkeypatch, env, rank):
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launched_rank() == rank


def test_more_cuda_devices_than_exist_says_what_exists(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ResourceError) as info:
        _check_devices("cuda", 4)
    assert "train.devices = 4 but this machine has 1 CUDA device; set train.devices to at " \
           "most 1" in str(info.value)
    _check_devices("cpu", 4)  # on CPU, devices are processes


def _config(tmp_path, **overrides):
    write_csv(tmp_path / "data" / "train.csv", review_rows(96, seed=1))
    write_csv(tmp_path / "data" / "test.csv", review_rows(32, seed=2))
    config = build_config({"train.max_epochs": 1, "train.accelerator": "cpu",
                           "model.dropout": 0.0, "train.group_by_length": False,
                           **overrides})
    return write_config(config, tmp_path / "config.yaml")


def _train(tmp_path, run, *args):
    result = run_cli("train", _config(tmp_path), "--run-dir", f"runs/{run}", "--json", *args,
                     cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)  # exactly one document: rank 1 prints nothing


@pytest.mark.distributed
@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    one = _train(tmp_path, "one", "--set", "train.batch_size=16")
    two = _train(tmp_path, "two", "--set", "train.batch_size=8", "--set", "train.devices=2")
    assert (one["fit"]["world_size"], two["fit"]["world_size"]) == (1, 2)
    assert one["fit"]["steps"] == two["fit"]["steps"]
    assert two["validation"]["loss"] == pytest.approx(one["validation"]["loss"], abs=0.02)
    run = tmp_path / "runs" / "two"
    starts = [line for line in (run / "events.jsonl").read_text().splitlines()
              if '"fit_start"' in line]
    assert len(starts) == 1  # only rank 0 writes events
    assert json.loads((run / "metrics.json").read_text())["fit"]["world_size"] == 2


@pytest.mark.distributed
def test_a_ddp_run_resumes_from_its_checkpoint_under_ddp(tmp_path):
    first = _train(tmp_path, "ddp", "--set", "train.devices=2")
    run = tmp_path / "runs" / "ddp"
    (run / "status.json").write_text(json.dumps({"status": "running"}))  # as if killed
    second = _train(tmp_path, "ddp", "--set", "train.devices=2", "--set",
                    "train.max_epochs=2", "--resume-with-changes")
    assert second["fit"]["steps"] == 2 * first["fit"]["steps"]
    assert second["fit"]["resumes"] == 1 and second["fit"]["world_size"] == 2
