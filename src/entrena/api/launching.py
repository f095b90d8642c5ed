"""``entrena.launch``: write the files that scale a run out (torchrun, SLURM, SkyPilot,
Docker) into ``<run dir>/launch/``."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from entrena.config import Config
from entrena.core.rundir import resolve_run_dir
from entrena.errors import ConfigError, closest_choice
from entrena.tasks.registry import load_config

__all__ = ["LaunchResult", "launch"]

PINNED = ("torch", "lightning-fabric", "transformers", "tokenizers", "safetensors", "pydantic",
          "pyyaml", "typer", "rich", "mlflow", "scikit-learn", "pandas", "pyarrow", "numpy",
          "psutil", "fsspec", "onnx", "onnxruntime", "onnxscript", "optuna")
"""Distributions pinned in the Dockerfile (entrena's dependencies)."""


@dataclass
class LaunchResult:
    """The files written.

    Attributes:
        files: Paths written, in ``<run dir>/launch/``.
        target: The target.
    """

    target: str
    files: list[Path]

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "files": [str(p) for p in self.files]}


def _versions() -> dict[str, str]:
    found = {}
    for name in PINNED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def launch(config: str | Path | dict[str, Any] | Config, *, target: str, nodes: int = 1,
           gpus_per_node: int = 1, accelerator: str = "A100", bucket: str | None = None,
           run_dir: str | Path | None = None,
           overrides: list[str] | dict[str, Any] | None = None) -> LaunchResult:
    """Write ``target``'s files into ``<run dir>/launch/``.

    Args:
        config: The run's config (its path is what the job runs).
        target: ``torchrun``, ``slurm``, ``skypilot`` or ``docker``.
        nodes: Machines.
        gpus_per_node: Processes (GPUs) per machine.
        accelerator: SkyPilot accelerator name.
        bucket: SkyPilot bucket for the run directory (default ``entrena-<name>``).

    Returns:
        The :class:`LaunchResult`.

    Raises:
        ConfigError: Unknown target (with the choices and the closest), a count below 1, or
            an invalid config.
    """
    from entrena.launching import TARGETS, LaunchSpec, render

    if target not in TARGETS:
        close = closest_choice(target, TARGETS)  # case-insensitive: SLURM finds slurm
        raise ConfigError(f"--target {target!r}: unknown target; choose one of "
                          f"{', '.join(TARGETS)}" + (f" (did you mean {close!r}?)"
                                                     if close else ""))
    for option, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):
        if value < 1:
            raise ConfigError(f"{option} {value}: must be at least 1")
    loaded = load_config(config, overrides)
    root = resolve_run_dir(loaded.config.name, run_dir)
    config_arg = (os.path.relpath(loaded.source) if loaded.source is not None
                  else f"{root}/config.yaml")
    spec = LaunchSpec(
        name=loaded.config.name, config=config_arg,
        run_dir=f"/checkpoints/runs/{loaded.config.name}" if target == "skypilot" else str(root),
        nodes=nodes, gpus_per_node=gpus_per_node, accelerator=accelerator,
        bucket=bucket or "", python=f"{sys.version_info.major}.{sys.version_info.minor}",
        packages=_versions())
    out = root / "launch"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render(spec, target).items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        if name.endswith((".sh", ".sbatch")):
            path.chmod(0o755)
        written.append(path)
    return LaunchResult(target, written)
