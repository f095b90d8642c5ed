"""`entrena launch`: the generated torchrun command, sbatch script, SkyPilot task and
Dockerfile parse and hold what scaling out needs (no cluster involved)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

import entrena
from conftest import run_cli
from entrena.errors import ConfigError


@pytest.fixture
def config(tiny_config, config_file):
    return config_file(tiny_config)


def _launch(config, target):
    result = entrena.launch(config, target=target, nodes=2, gpus_per_node=4)
    assert len(result.files) == 1 and result.files[0].parent.name == "launch"
    return result.files[0].read_text()


def _bash_syntax_ok(text, tmp_path):
    script = tmp_path / "check.sh"
    script.write_text(text)
    return subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_torchrun_command(config, tmp_path):
    text = _launch(config, "torchrun")
    assert _bash_syntax_ok(text, tmp_path)
    command = shlex.split(next(line for line in text.splitlines() if line.startswith("exec ")))
    assert command[1] == "torchrun"
    assert {"--nnodes=2", "--nproc-per-node=4", "--master-port=29500"} <= set(command)
    assert command[command.index("-m") + 1:command.index("-m") + 3] == ["entrena.cli", "train"]
    assert "train.devices=4" in command and "train.num_nodes=2" in command


def test_sbatch_requeues_on_preemption(config, tmp_path):
    text = _launch(config, "slurm")
    assert _bash_syntax_ok(text, tmp_path)
    directives = dict(line[len("#SBATCH --"):].partition("=")[::2]
                      for line in text.splitlines() if line.startswith("#SBATCH --"))
    assert directives["nodes"] == "2" and directives["ntasks-per-node"] == "4"
    assert directives["gpus-per-node"] == "4" and directives["signal"] == "B:USR1@120"
    assert "requeue" in directives
    assert "trap requeue USR1" in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "srun entrena train" in text


def test_skypilot_task_on_spot_with_a_checkpoint_bucket(config, tmp_path):
    task = yaml.safe_load(_launch(config, "skypilot"))
    assert task["num_nodes"] == 2
    assert task["resources"]["accelerators"] == "A100:4" and task["resources"]["use_spot"]
    assert task["resources"]["job_recovery"]["max_restarts_on_errors"] >= 1
    assert task["file_mounts"]["/checkpoints"] == {"name": "entrena-tiny", "mode": "MOUNT"}
    assert "--run-dir /checkpoints/runs/tiny" in task["run"]  # restarts find the checkpoints
    assert _bash_syntax_ok(task["run"], tmp_path)


def test_dockerfile_pins_the_current_versions(config):
    import torch

    text = _launch(config, "docker")
    lines = [line.strip() for line in text.splitlines() if line.strip()
             and not line.startswith("#")]
    assert lines[0].startswith("FROM python:3.")
    assert f"torch=={torch.__version__.split('+')[0]}" in text.replace("+cpu", "")
    assert json.loads(lines[-1][len("CMD "):])[0] == "train"
    assert any(line.startswith("ENTRYPOINT") for line in lines)


def test_unknown_target_names_the_choices(config):
    with pytest.raises(ConfigError) as info:
        entrena.launch(config, target="slurn")
    assert str(info.value) == ("--target 'slurn': unknown target; choose one of torchrun, "
                               "slurm, skypilot, docker (did you mean 'slurm'?)")


def test_a_target_in_the_wrong_case_is_refused_with_its_spelling(config):
    # Before: --target SLURM listed the choices with no hint (difflib compares case); targets
    # stay case-sensitive like every other choice (--format, --backend, --for).
    from typer.testing import CliRunner

    from entrena.cli import app

    result = CliRunner().invoke(app, ["launch", str(config), "--target", "SLURM"])
    assert result.exit_code == 2, result.output
    assert result.output == ("error: --target 'SLURM': unknown target; choose one of torchrun, "
                             "slurm, skypilot, docker (did you mean 'slurm'?)\n")
    assert not list(Path("runs").glob("*/launch"))


@pytest.mark.slow
def test_cli_launch_json(config, tmp_path):
    result = run_cli("launch", config, "--target", "torchrun", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["files"] == ["runs/tiny/launch/torchrun.sh"]
