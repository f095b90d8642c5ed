"""The only module that imports Lightning Fabric: devices, precision and strategies."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from entrena.errors import ResourceError
from entrena.hardware.detection import resolve_accelerator
from entrena.hardware.precision import resolve_precision

__all__ = ["Backend", "auto_cpu_bf16", "create_backend", "configure_threads",
           "seed_everything"]

log = logging.getLogger("entrena")


def auto_cpu_bf16(model: torch.nn.Module, precision: str) -> bool:
    """Whether ``precision: auto`` should be bf16-mixed if ``model`` trains on this CPU: native
    bf16 and enough ``nn.Linear`` weights (:func:`entrena.hardware.detection.cpu_bf16_pays`).
    Always ``False`` for an explicit precision. Pass it to :func:`create_backend`."""
    if precision != "auto":
        return False
    from entrena.hardware.detection import cpu_bf16_pays, detect_cpu

    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return cpu_bf16_pays(detect_cpu().bf16_fast, linear)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators in this process (as
    :meth:`Backend.seed`, before a backend exists: the model is built first)."""
    from lightning_fabric.utilities.seed import seed_everything as fabric_seed_everything

    fabric_seed_everything(seed, workers=True, verbose=False)


def configure_threads(num_threads: int | None) -> int:
    """Set torch's intra-op threads and return the number used.

    Default: the cores this process may use (:func:`entrena.hardware.threads.usable_cpus`:
    its CPU affinity, a cgroup quota, the physical cores). The physical core count alone
    oversubscribed ``taskset -c 0`` or ``docker --cpus 2`` runs: two threads on one allowed core
    ran the demo's steps with each thread busy half the time.
    """
    if num_threads is None:
        from entrena.hardware.threads import usable_cpus

        num_threads = usable_cpus()[0]
    torch.set_num_threads(max(1, int(num_threads)))
    return torch.get_num_threads()


@dataclass
class Backend:
    """A thin wrapper of :class:`lightning_fabric.Fabric` exposing what the loop needs."""

    fabric: Any
    accelerator: str
    precision: str

    @property
    def device(self) -> torch.device:
        return self.fabric.device

    @property
    def is_global_zero(self) -> bool:
        return self.fabric.is_global_zero

    @property
    def world_size(self) -> int:
        return self.fabric.world_size

    @property
    def global_rank(self) -> int:
        return self.fabric.global_rank

    def barrier(self) -> None:
        self.fabric.barrier()

    def seed(self, seed: int) -> None:
        """Seed Python's, NumPy's and torch's generators (every device, every rank)."""
        self.fabric.seed_everything(seed, workers=True, verbose=False)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        return self.fabric.setup(model, optimizer)

    def backward(self, loss: torch.Tensor) -> None:
        self.fabric.backward(loss)

    def clip_gradients(self, model: Any, optimizer: Any, max_norm: float) -> torch.Tensor:
        return self.fabric.clip_gradients(model, optimizer, max_norm=max_norm,
                                          error_if_nonfinite=False)

    def precision_state_dict(self) -> dict[str, Any]:
        """The gradient scaler's state under ``16-mixed`` (empty otherwise)."""
        return self.fabric._precision.state_dict()

    def load_precision_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.fabric._precision.load_state_dict(state)

    def no_backward_sync(self, model: Any, enabled: bool) -> Any:
        return self.fabric.no_backward_sync(model, enabled=enabled)

    def to_device(self, obj: Any) -> Any:
        return self.fabric.to_device(obj)

    def autocast(self) -> Any:
        return self.fabric.autocast()


def _check_devices(accelerator: str, devices: int | str) -> None:
    if devices == "auto" or accelerator != "cuda":
        return  # on CPU, devices are processes
    present = torch.cuda.device_count()
    if int(devices) > present:
        raise ResourceError(
            f"train.devices = {devices} but this machine has {present} CUDA device"
            f"{'s' if present != 1 else ''}; set train.devices to at most {present}, or use "
            f"more nodes (train.num_nodes) with `entrena launch`")


def create_backend(*, accelerator: str, devices: int | str, precision: str, seed: int,
                   deterministic: bool, num_nodes: int = 1, strategy: str = "auto",
                   cpu_bf16: bool = False) -> Backend:
    """Create and launch the Fabric backend.

    With more than one device (or node), ``launch()`` starts the other local processes by
    re-running this command (Fabric's subprocess launcher; under torchrun or SLURM it joins
    the processes already started); ranks above 0 continue from here too. On a CPU it first
    fixes the C allocator's mmap threshold (:func:`entrena.hardware.allocator.
    configure_allocator`): the largest tensors go back to the system when freed.

    Raises:
        ResourceError: The requested accelerator is not present, or fewer devices than
            ``devices``.
    """
    from lightning_fabric import Fabric

    # No banners on the console; a run that sends them to train.log (api/training.py's
    # library_output_to) lets them through at INFO.
    captured = getattr(logging.getLogger("lightning_fabric"), "entrena_captured", False)
    for name in ("lightning_fabric", "lightning_fabric.utilities.seed",
                 "lightning_fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.INFO if captured else logging.WARNING)
    resolved = resolve_accelerator(accelerator)
    if resolved == "cpu":
        from entrena.hardware.allocator import configure_allocator

        configure_allocator()  # the largest tensors go back to the system when freed
    chosen = resolve_precision(precision, resolved,
                               bf16=(torch.cuda.is_bf16_supported() if resolved == "cuda"
                                     else cpu_bf16))
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    _check_devices(resolved, devices)
    # resolve_precision returns one of Fabric's precision names, typed as a plain str
    fabric = Fabric(accelerator=resolved, devices=devices, num_nodes=num_nodes,
                    strategy=strategy, precision=chosen)  # type: ignore[arg-type]
    fabric.launch()
    fabric.seed_everything(seed, workers=True, verbose=False)
    return Backend(fabric=fabric, accelerator=resolved, precision=chosen)
