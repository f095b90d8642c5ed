"""This machine (detection, set-up problems) and the hardware catalog (accelerators, offers)."""

from entrena.hardware.detection import CpuInfo, GpuInfo, Machine, detect_machine
from entrena.hardware.problems import Problem, find_problems

__all__ = ["CpuInfo", "GpuInfo", "Machine", "Problem", "detect_machine", "find_problems"]
