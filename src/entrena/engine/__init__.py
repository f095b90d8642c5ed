"""Engine: the training loop and the Fabric backend."""

__all__: list[str] = []
