"""``train.precision: auto``, resolved once for the fit's backend and for the planner.

A pure function of the device and whether bf16 pays there, so that the precision a plan
prices is the precision the fit runs.
"""

from __future__ import annotations

__all__ = ["resolve_precision"]


def resolve_precision(configured: str, device: str, *, bf16: bool) -> str:
    """The Fabric precision a run uses on ``device``.

    An explicit ``train.precision`` is kept as it is. ``auto`` is, by device:

    - ``cuda``: ``bf16-mixed`` when ``bf16`` (compute capability 8.0 and newer), else
      ``16-mixed``;
    - ``mps``: ``16-mixed`` (bf16 autocast on MPS is not what PyTorch's AMP recipes use);
    - ``tpu``: ``bf16-mixed``;
    - ``cpu`` (and anything else): ``bf16-mixed`` when ``bf16`` — native bf16 and a model with
      enough ``nn.Linear`` weights for it to pay
      (:func:`entrena.hardware.detection.cpu_bf16_pays`) — else ``32-true``.

    Args:
        configured: ``train.precision`` (``auto``, ``32-true``, ``bf16-mixed``, ``16-mixed`` …).
        device: ``cpu``, ``cuda``, ``mps`` or ``tpu``.
        bf16: Whether bf16 is native on this device (and, on a CPU, pays for this model).

    Returns:
        The precision.
    """
    if configured != "auto":
        return configured
    if device == "cuda":
        return "bf16-mixed" if bf16 else "16-mixed"
    if device == "mps":
        return "16-mixed"
    if device == "tpu":
        return "bf16-mixed"
    return "bf16-mixed" if bf16 else "32-true"
