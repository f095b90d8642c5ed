"""When packing pays for ``task: llm-sft``, and what the shared prompt prefix saves (issue 21).

On the reviews-chat example's training chats (``examples/reviews-chat/config.yaml``):

1. the share of token slots that are padding in the first epoch's batches, length-grouped
   (entrena's default) and random, padded and packed (``pack_rows``: rows as wide as the
   batch's longest example), and what ``data.packing: auto`` decides for each;
2. the time of one LoRA training step (forward + backward, SmolLM2-135M, fp32) on the same
   batches laid out four ways, alternated ``--repeats`` times: padded with the shared prefix
   decoded per row, padded with it decoded once (``model.shared_prefix``), packed, and, for
   the packing overhead alone, "packed" into as many rows as padded (a grouped batch, whose
   examples do not fit two to a row: same shape, the block-diagonal mask instead of the
   padding mask). Ratios are medians over the repeats.

Usage::

    python benchmarks/experiments/llm_packing.py [--repeats 3] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import load_text, machine, today, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"


def step_time(model: Any, batch: dict[str, Any]) -> float:
    """Seconds of one forward + backward (no optimizer step) of ``batch``."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    out = model(**inputs)
    (out[:, 0].sum() / out[:, 1].sum()).backward()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import torch

    from entrena.data.batching import packed_padding_fraction, padding_fraction
    from entrena.tasks.llm_sft.task import PACKING_MIN_SAVING, LlmSftTask, packing_decision
    from entrena.tasks.registry import load_config

    torch.set_num_threads(args.threads)
    load = [os.getloadavg()[0]]
    task = LlmSftTask()
    rows = []
    plans = {}
    for group in (True, False):
        loaded = load_config(CONFIG, [f"train.group_by_length={str(group).lower()}",
                                      "data.packing=false"])
        if group:
            sources = task.model_sources(loaded)
            prepared = task.prepare(loaded, sources)
        source = task.batches(loaded, prepared, "train", batch_size=8, shuffle=True)
        plan = source.plan(0)
        lengths = prepared.splits.train.lengths
        padded, packed = padding_fraction(lengths, plan), packed_padding_fraction(lengths, plan)
        saving = 1 - (1 - padded) / (1 - packed)
        plans[group] = (source, plan)
        rows.append((group, padded, packed, saving,
                     packing_decision("auto", lengths, plan)))
    torch.manual_seed(0)
    model = task.build_model(loaded, sources, prepared).train()
    batches = {}
    for group, (source, plan) in plans.items():
        width = [max(source.lengths[b]) * len(b) - source.lengths[b].sum() for b in plan]
        # the batch with the most padding: where packing can gain most
        index = plan[max(range(len(plan)), key=lambda i: width[i])] if not group else plan[0]
        source.pack = False
        padded_batch = source.collate(index)
        source.pack = True
        batches[group] = (padded_batch, source.collate(index))
    timings: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for group, (padded_batch, packed_batch) in batches.items():
            kind = "grouped" if group else "random"
            for name, batch, share in (("padded, prefix per row", padded_batch, False),
                                       ("padded, prefix once", padded_batch, True),
                                       ("packed", packed_batch, False)):
                model.share_prefix = share
                timings.setdefault(f"{kind}: {name}", []).append(step_time(model, batch))
        load.append(os.getloadavg()[0])
    lines = [f"{today()}, {machine()}; {load_text(load)}.", "",
             f"`python benchmarks/experiments/llm_packing.py --repeats {args.repeats}`: the reviews-chat "
             "example's 400 training chats, batch 8, `model.max_length` 128; "
             f"{args.threads} torch thread(s).", "",
             "| first epoch's batches | padding, padded | padding, packed | slots saved by "
             "packing | `auto` packs |", "|---|---:|---:|---:|---|"]
    for group, padded, packed, saving, chosen in rows:
        lines.append(f"| {'length-grouped' if group else 'random'} | {padded:.1%} | "
                     f"{packed:.1%} | {saving:.1%} | {'yes' if chosen else 'no'} |")
    lines += ["", f"`auto` packs from {PACKING_MIN_SAVING:.0%} saved slots. One LoRA "
              "training step (forward + backward, SmolLM2-135M, fp32) of one batch, median "
              f"of {args.repeats} alternated repeats:", "",
              "| batch | layout | rows × tokens | step | vs padded, prefix per row |",
              "|---|---|---:|---:|---:|"]
    for group, (padded_batch, packed_batch) in batches.items():
        kind = "grouped" if group else "random"
        base = statistics.median(timings[f"{kind}: padded, prefix per row"])
        for name, batch in (("padded, prefix per row", padded_batch),
                            ("padded, prefix once", padded_batch), ("packed", packed_batch)):
            median = statistics.median(timings[f"{kind}: {name}"])
            shape = "×".join(str(n) for n in batch["input_ids"].shape)
            lines.append(f"| {'length-grouped' if group else 'random (most padded)'} | {name} "
                         f"| {shape} | {median:.2f} s | {median / base:.2f} |")
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("llm-packing", "## Packing and the shared prompt prefix (llm-sft)\n\n"
                      + body)


if __name__ == "__main__":
    main()
