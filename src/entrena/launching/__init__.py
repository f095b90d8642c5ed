"""Files to scale a run out: a torchrun command, an sbatch script, a SkyPilot task, a
Dockerfile. Pure text generation: nothing here runs or contacts a cluster."""

from entrena.launching.targets import TARGETS, LaunchSpec, render

__all__ = ["TARGETS", "LaunchSpec", "render"]
