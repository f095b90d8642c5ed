"""Data parallelism over a :class:`~entrena.data.batching.BatchSource`: each process takes its
share of every global batch, so N processes step like one process with the same global batch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = ["ShardedBatches", "launched_rank"]


def launched_rank() -> int:
    """This process's global rank when a launcher started it (torchrun and SLURM set ``RANK``
    / ``SLURM_PROCID``; Fabric's subprocess launcher sets ``LOCAL_RANK`` and ``NODE_RANK`` in
    the processes it starts); 0 for the process that launches the others or runs alone."""
    for name in ("RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit() and (name != "SLURM_PROCID"
                                                   or int(os.environ.get("SLURM_NTASKS", "1")) > 1):
            return int(os.environ[name])
    return int(os.environ.get("LOCAL_RANK", "0") or 0) + int(os.environ.get("NODE_RANK", "0") or 0)


class ShardedBatches:
    """Rank ``rank`` of ``world_size``: examples ``rank, rank + world_size, …`` of each batch
    of ``source`` (built with the global batch size).

    A global batch smaller than ``world_size`` (a tiny last batch) gives every rank its first
    example, so that no rank steps on an empty batch.
    """

    def __init__(self, source: Any, rank: int, world_size: int):
        self.source, self.rank, self.world_size = source, rank, world_size

    def plan(self, epoch: int) -> list[list[int]]:
        return [list(batch[self.rank::self.world_size]) or list(batch[:1])
                for batch in self.source.plan(epoch)]

    def collate(self, indices: Sequence[int]) -> Any:
        return self.source.collate(indices)

    def __len__(self) -> int:
        return len(self.source.plan(0))
