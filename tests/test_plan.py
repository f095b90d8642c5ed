"""``entrena plan`` and the planning step of ``entrena train``: documents, CLI, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli
from entrena.api import plan, train
from entrena.errors import ConfigError, ResourceError
from entrena.planning import Option
from entrena.planning.recommend import ram_refusal

OPTION_KEYS = {"name", "kind", "fits", "batch_size", "precision", "peak_memory_bytes",
               "epoch_time_s", "total_time_s", "cost_usd", "cost_usd_spot"}


def one_line_error(result) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_plan_document_has_the_keys_scripts_depend_on(tiny_config, config_file):
    doc = plan(config_file(tiny_config)).as_dict()
    assert set(doc) >= {"machine", "model", "options", "recommendation"}
    assert doc["model"]["parameters"] == doc["model"]["trainable_parameters"] > 0
    assert doc["model"]["flops_per_sample"] > 0
    kinds = {o["kind"] for o in doc["options"]}
    assert kinds == {"local", "cloud", "tpu"}
    for option in doc["options"]:
        assert OPTION_KEYS <= set(option)
    local = doc["options"][0]
    assert local["name"] == "local" and local["fits"] is True and local["batch_size"] == 8
    assert local["peak_memory_bytes"] > 0 and local["precision"] == "32-true"
    assert doc["recommendation"]["summary"]
    json.dumps(doc)


def test_padding_to_a_multiple_widens_the_batches_not_the_texts(tiny_config, config_file):
    """The data line of the plan counts real tokens; the padding to a multiple shows in the
    padding share and the batch widths (short texts: 16 tokens pad many to 32)."""
    docs = {}
    for multiple in (1, 16):
        config = {**tiny_config, "data": {**tiny_config["data"],
                                          "pad_to_multiple_of": multiple}}
        docs[multiple] = plan(config_file(config, f"m{multiple}.yaml"),
                              local_only=True).as_dict()["data"]
    assert docs[16]["mean_length"] == docs[1]["mean_length"] < docs[1]["longest_batch_tokens"]
    assert docs[16]["longest_batch_tokens"] % 16 == 0
    assert docs[16]["longest_batch_tokens"] >= docs[1]["longest_batch_tokens"]
    assert docs[16]["padding_fraction"] > docs[1]["padding_fraction"] + 0.05


def test_plan_says_what_the_data_checks_dropped(tiny_config, config_file, tmp_path):
    """A plan of fewer rows than the file has says why (a fresh user's repetitive CSV:
    'data: 124 training rows' of 450, the duplicates only visible through prepare)."""
    from conftest import review_rows, write_csv

    rows = review_rows(96, seed=1)
    write_csv(tmp_path / "data" / "train.csv", rows + rows[:40])  # 40 exact duplicates
    config = config_file(tiny_config)
    result = run_cli("plan", config, "--local-only", cwd=tmp_path, COLUMNS="200")
    assert result.returncode == 0, result.stderr
    dropped = [line for line in result.stderr.splitlines() if "dropped" in line]
    assert dropped and "duplicate" in dropped[0].lower(), result.stderr
    doc = plan(config, local_only=True).as_dict()
    assert any(c["status"] == "dropped" for c in doc["data_checks"])


@pytest.mark.parametrize("example", [
    # The LLM example converts and loads a 135 M-parameter model first (a minute): its plan
    # is checked by tests/test_llm_plan.py on the tiny Llama, and the real model trains (and
    # so plans) in the slow tests/test_llm_sft.py.
    p.parent.name for p in sorted(EXAMPLES.glob("*/config.yaml"))
    if p.parent.name != "reviews-chat"])
def test_every_shipped_example_config_is_planned(example, request):
    # each example's data comes from its own fixture (written when missing), so the test
    # does not rely on another file's tests having written it first
    request.getfixturevalue(f"{example}_data")
    result = plan(EXAMPLES / example / "config.yaml", local_only=True)
    local = result.options[0]
    assert local.fits and local.peak_memory_bytes > 0
    assert result.document["data"]["train_rows"] > 0


def test_hardware_selection_deadline_and_budget(tiny_config, config_file):
    result = plan(config_file(tiny_config), hardware=["A100", "local", "aws-p3.2xlarge"],
                  deadline="2h", budget="5usd")
    assert [o.name for o in result.options] == ["local", "aws-p3.2xlarge", "A100-40GB"]
    a100 = result.options[2]  # priced options first
    assert a100.kind == "gpu" and a100.cost_usd is None  # an accelerator has no price
    assert result.document["constraints"] == {"deadline_s": 7200.0, "budget_usd": 5.0,
                                              "budget_s": None}


def test_bad_limits_and_hardware_names_are_config_errors(tiny_config, config_file):
    path = config_file(tiny_config)
    with pytest.raises(ConfigError, match="invalid --deadline 'soon'"):
        plan(path, deadline="soon")
    with pytest.raises(ConfigError, match="a deadline is a duration"):
        plan(path, deadline="20usd")
    with pytest.raises(ConfigError, match="invalid --budget '20eur'"):
        plan(path, budget="20eur")
    with pytest.raises(ConfigError) as info:
        plan(path, hardware=["h10", "p3.2xlarge"])
    message = str(info.value)
    assert "'h10' (did you mean 'H100'?)" in message
    assert "'p3.2xlarge' (did you mean 'aws-p3.2xlarge'?)" in message
    assert "choose from: local, aws-p3.2xlarge" in message


def test_cli_plan_json_is_one_document(tiny_config, config_file, tmp_path):
    result = run_cli("plan", config_file(tiny_config), "--json", "--local-only", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [o["name"] for o in doc["options"]] == ["local"]
    table = run_cli("plan", config_file(tiny_config), "--hardware", "T4", cwd=tmp_path)
    assert table.returncode == 0 and table.stdout == ""
    assert "recommendation:" in table.stderr and "T4" in table.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--hardware", "rtx4090x"], "unknown hardware 'rtx4090x' (did you mean 'RTX-4090'?)"),
    (["--deadline", "tomorrow"], "invalid --deadline 'tomorrow'"),
    (["--budget", "lots"], "invalid --budget 'lots'"),
])
def test_cli_bad_input_exits_2_with_one_line(args, expected, tiny_config, config_file, tmp_path):
    result = run_cli("plan", config_file(tiny_config), *args, cwd=tmp_path)
    assert result.returncode == 2
    assert expected in one_line_error(result)


def test_cli_catalog_file_with_a_missing_or_negative_number_exits_2(tiny_config, config_file,
                                                                    tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("offers:\n  aws-g5.xlarge:\n    usd_per_hour: -1\n"
                       "  aws-p3.2xlarge:\n    usd_per_hour_spot:\n")
    result = run_cli("plan", config_file(tiny_config), "--catalog", catalog, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{catalog}: offers.aws-g5.xlarge.usd_per_hour: must not be negative" \
        in result.stderr
    assert "offers.aws-p3.2xlarge.usd_per_hour_spot: is missing a number" in result.stderr


def test_a_cpu_fit_plans_its_time_from_the_memory_measurements_step_until_timed(
        tiny_config, config_file, tmp_path, caplog):
    # Before, the plan (and a budget's refusal) came from the catalog's efficiency until the
    # fit's own steps were timed: 4x too slow on an Intel Xeon held to AVX2, which refused
    # the demo's 6-minute budget. The memory measurement's step is timed instead.
    import logging

    config = dict(tiny_config, train={**tiny_config["train"], "max_steps": 2})
    caplog.set_level(logging.INFO, logger="entrena")
    for name in ("measured", "cached"):
        caplog.clear()
        train(config_file(dict(config, name=name)))
        plan_line = next(r.getMessage() for r in caplog.records
                         if r.getMessage().startswith("plan: peak memory"))
        assert "by the memory measurement's step until the fit's first steps are timed" \
            in plan_line, plan_line
    entries = list((tmp_path / ".entrena-cache" / "profiles").glob("memory-*.json"))
    assert len(entries) == 1  # measured once, read back by the second run
    timing = json.loads(entries[0].read_text())["memory_step_timing"]
    rate, (batch, tokens, seconds) = timing
    assert rate > 0 and seconds > 0 and batch == config["train"]["batch_size"] and tokens > 0


def test_train_writes_plan_json_and_plan_vs_actual(tiny_config, config_file, tmp_path):
    config = dict(tiny_config)
    config["train"] = {**config["train"], "max_epochs": 1}
    result = train(config_file(config))
    plan_doc = json.loads((Path(result.run_dir) / "plan.json").read_text())
    local = plan_doc["options"][0]
    calibration = plan_doc["calibration"]
    # planning trains nothing: the memory was measured on a copy of the model, and the time
    # model was fitted to the fit's own optimizer steps 2 to 6 (plan.json rewritten)
    assert calibration["source"] == "training steps" and calibration["probe_s"] > 0
    steps = result.metrics["fit"]["steps"]
    assert calibration["steps"] == min(5, steps - 1) and len(calibration["shapes"]) == \
        calibration["steps"]
    assert local["time_source"].startswith("the fit's own first steps")
    assert calibration["flops_per_s"] > 0 and local["epoch_time_s"] > 0
    events = [json.loads(line) for line in
              (Path(result.run_dir) / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e["type"] == "step")
    assert first["step"] == 1 and 0 < first["since_process_start_s"] < 3600
    # a tiny model's rise can fit in memory the process already holds (0 bytes): measured,
    # not modelled (tests/test_plan_truth.py checks the rise grows with the batch)
    assert calibration["train_step_bytes"] >= 0 and calibration["eval_step_bytes"] >= 0
    batch = config["train"]["batch_size"]
    assert calibration["memory_shapes"]["train"][0] == batch
    assert calibration["memory_shapes"]["eval"][0] <= 2 * batch  # train.eval_batch_size
    comparison = result.metrics["plan_vs_actual"]
    assert comparison["peak_memory_bytes"]["predicted"] == local["peak_memory_bytes"]
    assert comparison["epoch_time_s"]["predicted"] == local["epoch_time_s"]
    assert comparison["peak_memory_bytes"]["actual"] > 0
    # One full epoch: the actual epoch time is the time in training steps.
    assert comparison["epoch_time_s"]["actual"] == pytest.approx(
        result.metrics["fit"]["train_time_s"])
    assert not calibration["memory_cached"]

    # Another run of the same model, batches and machine reads the measured step memory from
    # the cache instead of measuring it again (planning then costs no step at all).
    again = dict(config, name="tiny-again", train={**config["train"], "max_steps": 2})
    second = json.loads((Path(train(config_file(again)).run_dir) / "plan.json").read_text())
    cached = second["calibration"]
    assert cached["memory_cached"] and cached["probe_s"] == 0
    assert cached["train_step_bytes"] == calibration["train_step_bytes"]
    assert cached["eval_step_bytes"] == calibration["eval_step_bytes"]
    assert cached["source"] == "training steps" and cached["steps"] == 1
    # ... and how far above its base the first fit peaked: the second plan counts at least
    # that (a CPU fit's heap grows past one measured step)
    above = comparison["peak_memory_bytes"]["actual"] - calibration["base_rss_bytes"]
    if above > 0:
        assert cached["fit_peak_above_base_bytes"] == pytest.approx(above)
    else:  # the fit stayed inside a heap earlier tests in this process had freed: no rise
        assert not cached.get("fit_peak_above_base_bytes")
    assert second["options"][0]["peak_memory_bytes"] >= \
        cached["base_rss_bytes"] + max(above, 0) - 1


@pytest.mark.slow
def test_plan_second_call_reuses_the_cache(tmp_path, reviews_data):
    """The reviews config twice through the CLI: the second call answers from the cached data
    and model profile with the same plan. (How fast it answers is a benchmark figure, not a
    timed test: see docs/benchmarks.md.)"""
    config = EXAMPLES / "reviews" / "config.yaml"
    first = run_cli("plan", config, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_cli("plan", config, "--json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["model"]["flops_per_sample"] == two["model"]["flops_per_sample"]


def _cpu_option(**fields) -> Option:
    base = dict(name="local", kind="local", description="this machine", device="cpu",
                accelerator=None, count=1, fits=False, batch_size=512, max_batch_size=96,
                precision="32-true", peak_memory_bytes=40 * 2**30,
                memory_capacity_bytes=12 * 2**30, memory=None, epoch_time_s=None,
                total_time_s=None, time_source=None, usd_per_hour=None,
                usd_per_hour_spot=None, cost_usd=None, cost_usd_spot=None, notes=[])
    return Option(**{**base, **fields})


def test_ram_refusal_names_the_estimate_the_largest_batch_and_the_accumulation():
    message = ram_refusal(_cpu_option(), accumulation=2)
    assert message.startswith("train.batch_size = 512 needs about 40.0 GiB of RAM")
    assert "this machine has 12.0 GiB available" in message
    # 512 x 2 accumulation steps = 1024 examples a step; ceil(1024 / 96) = 11 batches of 96
    assert ("the largest batch that fits is about 96: set train.batch_size=96 and "
            "train.gradient_accumulation_steps=11 for 1056 examples a step (now 1024)") in message
    assert "even a batch of 1" in ram_refusal(_cpu_option(max_batch_size=0))
    assert ram_refusal(_cpu_option(fits=True)) is None
    assert ram_refusal(_cpu_option(fits=None)) is None  # RAM unknown: no refusal
    assert ram_refusal(_cpu_option(device="cuda")) is None  # a GPU splits batches itself


def test_train_refuses_a_batch_that_does_not_fit_in_ram_before_the_probe(
        tiny_config, config_file, tmp_path, monkeypatch):
    import dataclasses

    import entrena.recipes.planning as planning

    real = planning.detect_machine

    def short_of_ram(*args, **kwargs):
        machine = real(*args, **kwargs)
        return dataclasses.replace(machine, memory={**machine.memory, "available_bytes": 2**20})

    def no_probe(*args, **kwargs):
        raise AssertionError("the probe ran at a batch that does not fit")

    monkeypatch.setattr(planning, "detect_machine", short_of_ram)
    monkeypatch.setattr(planning, "calibrate", no_probe)
    config = dict(tiny_config)
    config["train"] = {**config["train"], "accelerator": "cpu"}
    with pytest.raises(ResourceError, match=r"train.batch_size = \d+ needs about .* of RAM .* "
                                            r"has 1.0 MiB available; even a batch of 1 does not"):
        train(config_file(config))
    assert not (tmp_path / "runs" / config["name"]).exists()  # nothing half-made is left
