"""The efficiency monitor and the diagnosis: FLOP counting, windows, findings, and the loop
with a slow data source (input-bound) and batches padded to the maximum length."""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pytest
import torch

from entrena.callbacks.diagnosis import diagnose, window_findings
from entrena.callbacks.efficiency import EfficiencyMonitor, useful_flops
from entrena.engine.loop import FitSettings, fit
from entrena.tasks.metrics import cross_entropy_loss
from fakes import FakeBackend, FakeSource, ScriptedEvaluate, TinyModel


def test_useful_flops_counts_real_lengths():
    assert useful_flops(np.array([2, 3]), (10.0, 100.0, 1.0)) == 2 * 10 + 100 * 5 + (4 + 9)


def test_a_fixed_size_profile_counts_each_example_once_whatever_its_tokens(tmp_path):
    """A fixed-size profile counts one example as one "token" (plan data.max_length 1)
    while a batch may report token lengths for throughput: FLOPs must not grow with them."""
    from entrena.recipes.efficiency import build_monitor

    plan = {"data": {"max_length": 1},
            "model": {"flops_per_sample_formula": {"constant": 10.0, "per_token": 100.0,
                                                   "per_token_squared": 1.0}}}
    monitor = build_monitor(plan=plan, lengths=np.array([80, 120]), accelerator="cpu",
                            precision="32-true", threads=1, cache_dir=tmp_path, every_steps=0,
                            emit=None, peak_memory=lambda: None)
    assert useful_flops(monitor.lengths, monitor.formula) == 2 * (10 + 100 + 1)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_the_threads_finding_counts_the_cores_this_process_may_use(tmp_path):
    # Before: under `taskset -c 0` on a 2-core machine, a 1-thread fit was told to "set
    # train.num_threads: 2" (psutil's core count, not the process's).
    from entrena.recipes.efficiency import build_monitor

    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        monitor = build_monitor(plan=None, lengths=np.array([8]), accelerator="cpu",
                                precision="32-true", threads=1, cache_dir=tmp_path,
                                every_steps=0, emit=None, peak_memory=lambda: None)
    finally:
        os.sched_setaffinity(0, before)
    assert monitor.cores == 1


class SlowSource(FakeSource):
    """Collate sleeps: the loop waits for its data."""

    def collate(self, indices):
        time.sleep(0.05)
        return super().collate(indices)


class PaddedSource(FakeSource):
    """Each sequence has 2 real tokens, padded to 8 (a run padded to max_length)."""

    def collate(self, indices):
        batch = super().collate(indices)
        ids = torch.zeros(len(indices), 8, dtype=torch.long)
        ids[:, :2] = batch["input_ids"][:, :2]
        mask = torch.zeros_like(ids)
        mask[:, :2] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": batch["labels"]}


def monitored_fit(source, records=None):
    monitor = EfficiencyMonitor(
        lengths=np.full(source.n, 6), flops_formula=(0.0, 1000.0, 0.0), peak_flops_per_s=1e9,
        peak_source="test", device="cpu", threads=1, memory_capacity_bytes=2**34,
        peak_memory=lambda: 2**30, every_steps=2, persist_windows=2,
        emit=(lambda kind, state, **f: records.append((kind, f))) if records is not None
        else None)
    model = TinyModel()
    state = fit(backend=FakeBackend(), model=model, loss=cross_entropy_loss,
                optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train=source,
                evaluate=ScriptedEvaluate([1.0]), settings=FitSettings(max_epochs=1),
                callbacks=[monitor])
    return state, monitor


def test_monitor_summarises_the_fit_and_emits_windows():
    records = []
    state, monitor = monitored_fit(FakeSource(n=40, batch_size=4), records)
    summary = state.extras["efficiency"]
    assert summary["useful_flops"] == 40 * 6 * 1000.0
    assert summary["mfu"] == summary["achieved_flops_per_s"] / 1e9
    assert 0 < summary["data_wait_fraction"] < 1
    assert summary["throughput_samples_per_s"] == state.samples_seen / state.train_time_s
    assert summary["padding_fraction"] == 0.0
    assert [kind for kind, _ in records] == ["efficiency"] * 5  # 10 steps, every 2
    assert monitor.state_dict() == {"useful_flops": 240000.0}


def test_a_slow_data_source_is_diagnosed_as_input_bound(caplog):
    with caplog.at_level(logging.WARNING, logger="entrena"):
        state, _ = monitored_fit(SlowSource(n=40, batch_size=4))
    summary = state.extras["efficiency"]
    assert summary["data_wait_fraction"] > 0.3
    codes = [f["code"] for f in diagnose(summary)]
    assert codes[0] == "input_bound"
    assert "input-bound" in caplog.text  # live: the condition held for 2 windows


def test_padding_to_max_length_is_diagnosed_as_padding_waste():
    state, _ = monitored_fit(PaddedSource(n=40, batch_size=4))
    summary = state.extras["efficiency"]
    assert summary["padding_fraction"] == 0.75
    finding = next(f for f in diagnose(summary) if f["code"] == "padding_waste")
    assert "75%" in finding["figure"] and "group_by_length" in finding["change"]
    assert "data.pad_to_multiple_of" in finding["change"]  # the other padding lever


def test_diagnosis_findings_name_their_figure_and_change():
    summary = {"mfu": 0.05, "peak_flops_per_s": 1e11, "peak_source": "measured", "device": "cpu",
               "memory_share": 0.1, "peak_memory_bytes": 2**30, "memory_capacity_bytes": 10 * 2**30,
               "cpu_utilisation": 0.3, "threads": 2, "cores": 2, "data_wait_fraction": 0.01,
               "padding_fraction": 0.05}
    found = {f["code"]: f for f in diagnose(
        summary, plan_vs_actual={"epoch_time_s": {"predicted": 10.0, "actual": 30.0},
                                 "peak_memory_bytes": {"predicted": 100, "actual": 110}},
        fit={"stop_reason": "early_stopping", "epochs": 2, "max_epochs": 5,
             "epoch_time_s": 120.0, "usd_per_hour": 2.0})}
    assert set(found) == {"memory_headroom", "low_mfu", "threads_idle", "early_stopping_saved",
                          "plan_off"}
    assert "3 epoch(s)" in found["early_stopping_saved"]["message"]
    assert "6.0 min" in found["early_stopping_saved"]["message"]
    assert "0.20 USD" in found["early_stopping_saved"]["message"]
    assert "epoch_time_s" in found["plan_off"]["figure"] and "3.00x" in found["plan_off"]["figure"]
    assert "--calibrate" in found["plan_off"]["change"]
    # a CPU fit above its planned memory: the heap grew, and the next plan knows it
    above = {"peak_memory_bytes": {"predicted": 100, "actual": 136}}
    grown = next(f for f in diagnose(summary, plan_vs_actual=above,
                                     fit={"peak_remembered": True}) if f["code"] == "plan_off")
    assert "planned from this fit's peak" in grown["change"]
    unknown = next(f for f in diagnose(summary, plan_vs_actual=above) if f["code"] == "plan_off")
    assert "--calibrate" in unknown["change"]
    for finding in found.values():
        assert finding["figure"] and finding["change"]
    assert window_findings({"data_wait_fraction": 0.1, "padding_fraction": 0.1}) == []


def test_measuring_the_cpu_peak_leaves_the_global_rng_alone(tmp_path):
    from entrena.hardware.peak import cpu_peak_flops_measured

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    peak, source = cpu_peak_flops_measured(tmp_path, 1)
    assert peak > 0 and "measured" in source
    assert torch.equal(torch.rand(3), expected)
    assert cpu_peak_flops_measured(tmp_path, 1) == (peak, source)  # cached


def test_one_thread_is_not_told_to_spread_its_steps_and_good_news_is_not_a_warning(caplog):
    import logging

    from entrena.recipes.efficiency import log_finding

    summary = {"device": "cpu", "cpu_utilisation": 0.3, "threads": 1, "cores": 2}
    idle = next(f for f in diagnose(summary) if f["code"] == "threads_idle")
    assert "batch_size" not in idle["change"] and "outside its training steps" in idle["change"]
    saved = next(f for f in diagnose({}, fit={"stop_reason": "early_stopping", "epochs": 2,
                                             "max_epochs": 5, "epoch_time_s": 1.0})
                 if f["code"] == "early_stopping_saved")
    with caplog.at_level(logging.INFO, logger="entrena"):
        log_finding(saved)
        log_finding(idle)
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.INFO, logging.INFO]  # hardware and "nothing to change": INFO
