"""One renderer per target: ``render(spec, target) -> {file name: text}``."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

__all__ = ["TARGETS", "LaunchSpec", "render"]

TARGETS = ("torchrun", "slurm", "skypilot", "docker")
"""The targets ``entrena launch --target`` writes files for."""


@dataclass(frozen=True)
class LaunchSpec:
    """What the generated files run.

    Attributes:
        name: The run name (job names, the run directory).
        config: The config path as the job sees it (relative to the job's working directory).
        run_dir: The run directory as the job sees it.
        nodes: Machines.
        gpus_per_node: Processes (GPUs) per machine.
        accelerator: The SkyPilot accelerator name (``A100``, ``H100`` …).
        bucket: The SkyPilot storage bucket holding the run directory (checkpoints survive
            a preempted machine).
        python: ``major.minor`` of the Python to pin in the Dockerfile.
        packages: ``{distribution: version}`` pinned in the Dockerfile.
    """

    name: str
    config: str
    run_dir: str
    nodes: int = 1
    gpus_per_node: int = 1
    accelerator: str = "A100"
    bucket: str = ""
    python: str = "3.11"
    packages: dict[str, str] = field(default_factory=dict)

    def train_args(self) -> list[str]:
        """``train CONFIG --run-dir … --set …``: the same command on every rank."""
        return ["train", self.config, "--run-dir", self.run_dir,
                "--set", f"train.devices={self.gpus_per_node}",
                "--set", f"train.num_nodes={self.nodes}"]


def _torchrun(spec: LaunchSpec, rank: str, addr: str, port: str = "29500") -> str:
    args = ["torchrun", f"--nnodes={spec.nodes}", f"--nproc-per-node={spec.gpus_per_node}",
            f"--node-rank={rank}", f"--master-addr={addr}", f"--master-port={port}",
            "-m", "entrena.cli", *spec.train_args()]
    return " ".join(a if a.startswith("$") or "=$" in a else shlex.quote(a) for a in args)


def render_torchrun(spec: LaunchSpec) -> dict[str, str]:
    body = f'''#!/usr/bin/env bash
# Run on every node of {spec.name} ({spec.nodes} node(s) x {spec.gpus_per_node} process(es)).
# NODE_RANK: 0 on the first node, 1, 2 … on the others; MASTER_ADDR: the first node's address.
# Re-running the same command after a crash resumes the run from its newest checkpoint.
set -euo pipefail
NODE_RANK="${{NODE_RANK:-0}}"
MASTER_ADDR="${{MASTER_ADDR:-127.0.0.1}}"
exec {_torchrun(spec, "$NODE_RANK", "$MASTER_ADDR")}
'''
    return {"torchrun.sh": body}


def render_slurm(spec: LaunchSpec) -> dict[str, str]:
    train = " ".join(shlex.quote(a) for a in spec.train_args())
    body = f'''#!/usr/bin/env bash
#SBATCH --job-name={spec.name}
#SBATCH --nodes={spec.nodes}
#SBATCH --ntasks-per-node={spec.gpus_per_node}
#SBATCH --gpus-per-node={spec.gpus_per_node}
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output={spec.name}-%j.out
# Submit with `sbatch {spec.name}.sbatch`. Two minutes before the time limit, or on
# preemption, SLURM signals this script: the tasks get SIGUSR1 (entrena saves a checkpoint
# and exits 143) and the job goes back in the queue; the requeued job resumes the run.
set -uo pipefail
requeue() {{
  echo "SIGUSR1: saving a checkpoint and requeueing job $SLURM_JOB_ID"
  kill -USR1 "$SRUN_PID" 2>/dev/null
  wait "$SRUN_PID"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
}}
trap requeue USR1
# One task per GPU; Fabric reads SLURM's variables (SLURM_PROCID, SLURM_NTASKS …).
srun entrena {train} &
SRUN_PID=$!
wait "$SRUN_PID"
'''
    return {f"{spec.name}.sbatch": body}


def render_skypilot(spec: LaunchSpec) -> dict[str, str]:
    import yaml

    bucket = spec.bucket or f"entrena-{spec.name.lower().replace('_', '-').replace('.', '-')}"
    train = " ".join(shlex.quote(a) for a in spec.train_args()[1:])  # after "train"
    run = (f'if [ "$SKYPILOT_NUM_NODES" -gt 1 ] || [ "{spec.gpus_per_node}" -gt 1 ]; then\n'
           f'  MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
           f'  torchrun --nnodes="$SKYPILOT_NUM_NODES" '
           f'--nproc-per-node="$SKYPILOT_NUM_GPUS_PER_NODE" '
           f'--node-rank="$SKYPILOT_NODE_RANK" --master-addr="$MASTER_ADDR" '
           f'--master-port=29500 -m entrena.cli train {train}\n'
           f'else\n  entrena train {train}\nfi\n')
    task = {
        "name": spec.name,
        "num_nodes": spec.nodes,
        "resources": {"accelerators": f"{spec.accelerator}:{spec.gpus_per_node}",
                      "use_spot": True,
                      "job_recovery": {"strategy": "FAILOVER",
                                       "max_restarts_on_errors": 3}},
        "workdir": ".",
        "file_mounts": {"/checkpoints": {"name": bucket, "mode": "MOUNT"}},
        "setup": "pip install -e . 2>/dev/null || pip install entrena\n",
        "run": run,
    }
    header = (f"# SkyPilot managed job: `sky jobs launch {spec.name}.sky.yaml`. On spot\n"
              f"# preemption SkyPilot starts a new machine and reruns `run`; the run directory\n"
              f"# lives in the bucket {bucket} mounted at /checkpoints, so `entrena train`\n"
              f"# resumes from the newest checkpoint instead of starting over.\n")
    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None  # shell scripts stay readable
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return {f"{spec.name}.sky.yaml": header + yaml.dump(task, Dumper=Dumper, sort_keys=False)}


def render_docker(spec: LaunchSpec) -> dict[str, str]:
    pins = " \\\n    ".join(f"{name}=={version}" for name, version in sorted(spec.packages.items()))
    body = f'''# The versions this run was planned with (pinned from the current environment).
# Build: docker build -f {spec.run_dir}/launch/Dockerfile -t entrena-{spec.name.lower()} .
FROM python:{spec.python}-slim
WORKDIR /work
RUN pip install --no-cache-dir \\
    {pins}
COPY . /work
RUN pip install --no-cache-dir --no-deps -e .
ENTRYPOINT ["entrena"]
CMD {_json_list(spec.train_args())}
'''
    return {"Dockerfile": body}


def _json_list(items: list[str]) -> str:
    import json

    return json.dumps(items)


_RENDERERS = {"torchrun": render_torchrun, "slurm": render_slurm,
              "skypilot": render_skypilot, "docker": render_docker}


def render(spec: LaunchSpec, target: str) -> dict[str, str]:
    """The files of ``target`` (one of :data:`TARGETS`) as ``{file name: text}``."""
    return _RENDERERS[target](spec)
