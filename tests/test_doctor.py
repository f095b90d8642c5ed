"""``entrena doctor``: detection of this machine and the set-up problems with their fixes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import clean_env, run_cli
from entrena.api import doctor
from entrena.hardware import CpuInfo, GpuInfo, Machine, find_problems

GIB = 2**30


def machine(**changes) -> Machine:
    """A healthy made-up machine: 8 cores, 32 GiB, a CPU build of torch, no GPU."""
    base = Machine(
        cpu=CpuInfo(model="Test CPU", cores=8, logical_cores=16, frequency_mhz=3000.0,
                    features={"avx2": True}, torch_capability="AVX2"),
        memory={"total_bytes": 32 * GIB, "available_bytes": 20 * GIB},
        gpus=[],
        gpu_driver={"driver_version": None, "cuda_driver_version": None, "nvml_gpus": None},
        mps={"available": False},
        tpu={"available": False, "source": None, "devices": 0, "kind": None},
        disk={"path": "/x/runs", "free_bytes": 100 * GIB, "total_bytes": 500 * GIB, "ssd": True},
        torch={"version": "2.14.1+cpu", "cuda": None, "build": "cpu", "threads": 8,
               "cuda_libraries_bytes": 0},
        libraries={"torch": "2.14.1"},
        python="3.11.7",
        platform="Linux",
    )
    return replace(base, **changes)


def h100(free: int = 79 * GIB) -> GpuInfo:
    return GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB,
                   memory_free_bytes=free, compute_capability="9.0", bf16=True)


def codes(m: Machine, env: dict | None = None) -> list[str]:
    return [p.code for p in find_problems(m, env or {})]


def test_a_healthy_machine_has_no_problems():
    assert find_problems(machine(), {}) == []
    gpu_box = machine(gpus=[h100()], torch={"version": "2.14.1+cu126", "cuda": "12.6",
                                            "build": "cuda", "threads": 8,
                                            "cuda_libraries_bytes": 3 * GIB},
                      gpu_driver={"driver_version": "560.35", "cuda_driver_version": "12.6",
                                  "nvml_gpus": 1})
    assert find_problems(gpu_box, {}) == []


def test_cuda_torch_on_a_machine_without_gpu_says_how_big_and_how_to_fix():
    m = machine(torch={"version": "2.14.1+cu130", "cuda": "13.0", "build": "cuda",
                       "threads": 8, "cuda_libraries_bytes": int(3.1 * GIB)})
    [problem] = find_problems(m, {})
    assert problem.code == "cuda_torch_without_gpu" and problem.severity == "warning"
    assert "3.1 GiB" in problem.message
    assert problem.fix == ("install the CPU build: pip install --force-reinstall "
                           "'torch==2.14.1' --index-url https://download.pytorch.org/whl/cpu")


def test_gpu_with_cpu_only_torch_is_an_error_with_the_cuda_wheel_to_install():
    m = machine(gpu_driver={"driver_version": "550.54", "cuda_driver_version": "12.4",
                            "nvml_gpus": 2})
    [problem] = find_problems(m, {})
    assert problem.code == "gpu_without_cuda_torch" and problem.severity == "error"
    assert "sees 2 GPU(s)" in problem.message
    assert problem.fix.endswith("--index-url https://download.pytorch.org/whl/cu124")


def test_gpu_seen_by_the_driver_but_not_by_cuda_torch():
    m = machine(torch={"version": "2.14.1+cu130", "cuda": "13.0", "build": "cuda",
                       "threads": 8, "cuda_libraries_bytes": GIB},
                gpu_driver={"driver_version": "535.1", "cuda_driver_version": "12.2",
                            "nvml_gpus": 1})
    assert codes(m) == ["gpu_not_usable"]


def test_low_disk_low_memory_busy_gpu():
    m = machine(disk={"path": "/x/runs", "free_bytes": GIB, "total_bytes": 500 * GIB,
                      "ssd": None},
                memory={"total_bytes": 8 * GIB, "available_bytes": GIB},
                gpus=[h100(free=10 * GIB)],
                torch={"version": "2.14.1", "cuda": "12.6", "build": "cuda", "threads": 8,
                       "cuda_libraries_bytes": GIB},
                gpu_driver={"driver_version": "560", "cuda_driver_version": "12.6",
                            "nvml_gpus": 1})
    problems = {p.code: p for p in find_problems(m, {})}
    assert set(problems) == {"low_disk", "low_memory", "gpu_memory_in_use"}
    assert "--run-dir" in problems["low_disk"].fix
    assert "10.0 GiB free of 80.0 GiB" in problems["gpu_memory_in_use"].message


def test_too_few_threads_names_the_variable_and_cpu_quota_oversubscription():
    m = machine(torch={"version": "2.14.1", "cuda": None, "build": "cpu", "threads": 1,
                       "cuda_libraries_bytes": 0})
    [problem] = find_problems(m, {"OMP_NUM_THREADS": "1"})
    assert problem.code == "few_threads"
    assert "OMP_NUM_THREADS=1" in problem.message and problem.fix == "unset OMP_NUM_THREADS"
    quota = machine(cpu=CpuInfo(model="c", cores=8, logical_cores=8, cpu_quota=2.5),
                    torch={"version": "2.14.1", "cuda": None, "build": "cpu", "threads": 8,
                           "cuda_libraries_bytes": 0})
    [problem] = find_problems(quota, {})
    assert problem.code == "cpu_quota_below_cores"
    assert problem.fix.startswith("set train.num_threads: 2")


def test_errors_come_before_warnings():
    m = machine(gpu_driver={"driver_version": "550", "cuda_driver_version": "12.4",
                            "nvml_gpus": 1},
                disk={"path": "/r", "free_bytes": 0, "total_bytes": GIB, "ssd": False})
    assert codes(m) == ["gpu_without_cuda_torch", "low_disk"]


def test_doctor_reports_this_machine_with_the_documented_keys(tmp_path):
    report = doctor(tmp_path / "runs").as_dict()
    assert report["cpu"]["cores"] >= 1
    assert report["memory"]["total_bytes"] > 2**28
    assert isinstance(report["gpus"], list)
    assert report["torch"]["version"]
    assert isinstance(report["problems"], list)
    for problem in report["problems"]:
        assert set(problem) == {"code", "severity", "message", "fix"}
    assert report["disk"]["free_bytes"] > 0
    json.dumps(report)  # serialisable


def test_cli_doctor_json_is_one_document_on_stdout(tmp_path):
    result = run_cli("doctor", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"cpu", "memory", "gpus", "torch", "problems"} <= set(data)
    table = run_cli("doctor", cwd=tmp_path)
    assert table.returncode == 0 and table.stdout == ""
    assert "this machine" in table.stderr


@pytest.mark.parametrize("command", ["doctor", "plan"])
def test_help_of_the_planning_commands_does_not_import_torch(tmp_path, command):
    script = ("import sys\nfrom entrena.cli import app\n"
              f"try:\n    app(['{command}', '--help'])\nexcept SystemExit:\n    pass\n"
              "assert 'torch' not in sys.modules, 'torch imported'\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert command in result.stdout
