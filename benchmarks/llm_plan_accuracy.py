"""The LLM planner (``entrena.planning.llm``) against measured LoRA / full fine-tuning steps of
SmolLM2-135M on this CPU, and against published GPU figures.

Each configuration runs in a fresh process: the model (entrena's ``llm-sft`` model, fp32,
loss on the target tokens only) is built, the peak RSS is reset (``/proc/self/clear_refs``),
then ``--steps`` AdamW steps run on a random batch of (batch, sequence) tokens whose last
``--targets`` tokens per row are targets. Measured memory: the peak RSS of the steps minus
the RSS before the model was built (weights, adapters, optimizer state, activations; not
the Python runtime and the imported libraries). Time: the last step's wall time. The
planner is given the same settings (fp32 activations, LoRA dropout, logits at target
positions only). Calibrated as the classifiers' plan is, by a probe: the first
configuration is measured, its activation memory (measured minus weights and optimizer
states) over the formula's gives a factor applied to the others' activation terms, and its
step time over its FLOPs gives the machine's FLOP rate.

Usage::

    python benchmarks/llm_plan_accuracy.py            # measure, print, write the doc section
    python benchmarks/llm_plan_accuracy.py --no-write

Needs the converted SmolLM2 folder (any ``entrena train`` of the reviews-chat example makes
it) or converts it into entrena's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import load_text, machine, today, write_section  # noqa: E402

GIB = 2**30
CONFIGS = [  # (name, mode, batch, sequence, rank, gradient checkpointing)
    ("lora r16 b2 s128", "lora", 2, 128, 16, False),
    ("lora r16 b4 s256", "lora", 4, 256, 16, False),
    ("lora r16 b4 s256 checkpointing", "lora", 4, 256, 16, True),
    ("lora r64 b2 s256", "lora", 2, 256, 64, False),
    ("full b2 s128", "full", 2, 128, 16, False),
]
TORCHTUNE_TARGETS = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PUBLISHED = [  # (what, settings for llm_memory, published bytes, source)
    ("Llama 3.1 8B QLoRA, 1x RTX 4090, batch 2, packed 2048",
     {"mode": "qlora", "context": 2048, "batch_size": 2, "lora_rank": 8,
      "lora_targets": TORCHTUNE_TARGETS, "fused_loss": True}, 7.4 * GIB,
     "torchtune README, 'Memory and training speed' (7.4 GiB)"),
    ("Llama 3.1 8B LoRA, 1x RTX 4090, batch 2, packed 2048",
     {"mode": "lora", "context": 2048, "batch_size": 2, "lora_rank": 8,
      "lora_targets": TORCHTUNE_TARGETS, "fused_loss": True}, 16.2 * GIB,
     "torchtune README, 'Memory and training speed' (16.2 GiB)"),
    ("Llama 3.1 8B QLoRA, 2,972 tokens, batch 1, on an 8 GB card",
     {"mode": "qlora", "context": 2972, "batch_size": 1, "lora_rank": 32,
      "lora_targets": "all-linear", "fused_loss": True}, 8e9,
     "Unsloth's context-length table (8 GB)"),
]


def _rss_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure_one(folder: str, mode: str, batch: int, sequence: int, rank: int,
                checkpointing: bool, steps: int, targets: int, threads: int,
                default_allocator: bool = False) -> dict:
    """One configuration, in this process (the parent runs each in a fresh one)."""
    import peft  # noqa: F401 - imported before the baseline RSS is read
    import torch
    from transformers import LlamaForCausalLM  # noqa: F401

    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    if not default_allocator:  # as a fit's CPU backend does (hardware/allocator.py)
        from entrena.hardware.allocator import configure_allocator

        configure_allocator()
    tokenizer = build_tokenizer(folder)
    before = _rss_bytes("VmRSS")
    model = build_sft_model(pretrained=folder, architecture=None, tokenizer=tokenizer,
                            finetuning=mode, lora={"r": rank, "alpha": 2 * rank,
                                                   "dropout": 0.05,
                                                   "target_modules": "all-linear"},
                            dropout=0.0, max_new_tokens=2,
                            gradient_checkpointing=checkpointing).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(10, 40000, (batch, sequence))
    target = torch.zeros_like(ids)
    target[:, -targets:] = 1
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again here
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), target_mask=target)
        (out[:, 0].sum() / out[:, 1].sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
    return {"peak_bytes": _rss_bytes("VmHWM") - before, "step_times_s": times,
            "threads": torch.get_num_threads()}


def planned(folder: str, mode: str, batch: int, sequence: int, rank: int,
            checkpointing: bool, targets: int) -> tuple[float, float, float]:
    """(bytes, activation bytes, FLOPs) the planner gives the configuration."""
    from entrena.planning.llm import llm_memory, llm_step_flops, load_llm_shape

    shape = load_llm_shape(folder)
    memory = llm_memory(shape, mode=mode, context=sequence, batch_size=batch, lora_rank=rank,
                        gradient_checkpointing=checkpointing, activation_bytes=4,
                        logits_positions=batch * targets, lora_dropout=mode != "full")
    flops = llm_step_flops(shape, mode=mode, tokens=batch * sequence, context=sequence,
                           logits_positions=batch * targets,
                           gradient_checkpointing=checkpointing)
    return memory.total_bytes, memory.activations_bytes, flops


def smollm2_folder() -> str:
    from entrena.data.remote import default_cache_dir
    from entrena.tasks.llm_sft.sources import resolve_llm_source

    return resolve_llm_source("smollm2-135m", None, default_cache_dir(None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--targets", type=int, default=4, help="target tokens per row")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a shared machine two threads wait on "
                             "each other, see the demo section)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--only", help="configurations whose name contains this (implies "
                        "--no-write; the first one is the probe)")
    parser.add_argument("--default-allocator", action="store_true",
                        help="leave glibc's adaptive mmap threshold (a fit fixes it)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child: a JSON configuration
    args = parser.parse_args()
    if args.one:
        spec = json.loads(args.one)
        print(json.dumps(measure_one(**spec, steps=args.steps, targets=args.targets,
                                     threads=args.threads)))
        return
    from entrena.planning.llm import llm_memory, llm_step_time_s, load_llm_shape

    folder = smollm2_folder()
    load = [os.getloadavg()[0]]
    rows = []
    configs = [c for c in CONFIGS if not args.only or args.only in c[0]]
    if args.only:
        args.no_write = True
    for name, mode, batch, sequence, rank, checkpointing in configs:
        spec = {"folder": folder, "mode": mode, "batch": batch, "sequence": sequence,
                "rank": rank, "checkpointing": checkpointing,
                "default_allocator": args.default_allocator}
        done = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec),
                               "--steps", str(args.steps), "--targets", str(args.targets),
                               "--threads", str(args.threads)],
                              capture_output=True, text=True, check=True)
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        plan_bytes, plan_activations, flops = planned(folder, mode, batch, sequence, rank,
                                                      checkpointing, args.targets)
        rows.append({"name": name, **measured, "plan_bytes": plan_bytes,
                     "plan_activations": plan_activations, "flops": flops})
        load.append(os.getloadavg()[0])
        print(f"{name}: measured {measured['peak_bytes'] / GIB:.2f} GiB, planned "
              f"{plan_bytes / GIB:.2f} GiB; step {measured['step_times_s'][-1]:.1f}s",
              flush=True)
    probe = rows[0]
    fixed = probe["plan_bytes"] - probe["plan_activations"]  # weights and optimizer states
    factor = (probe["peak_bytes"] - fixed) / probe["plan_activations"]
    lines = [f"{today()}, {machine()}; {load_text(load)}.",
             "",
             f"`python benchmarks/llm_plan_accuracy.py` (SmolLM2-135M, fp32, {args.threads} "
             f"torch thread(s), {args.steps} AdamW steps per configuration in a fresh process, "
             f"{args.targets} target tokens per row, LoRA dropout 0.05 on all linear layers; "
             "time = the last step). Formula: `llm_memory` as is; calibrated: its activation "
             f"term times {factor:.2f}, the probe's measured over planned activations, and "
             "the time from the probe's FLOP rate:",
             "",
             "| configuration | peak memory measured | formula | error | calibrated | error "
             "| step time measured | calibrated | error |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        step = row["step_times_s"][-1]
        predicted = llm_step_time_s(row["flops"], probe["flops"], probe["step_times_s"][-1])
        calibrated = row["plan_bytes"] + (factor - 1) * row["plan_activations"]
        cells = [row["name"], f"{row['peak_bytes'] / GIB:.2f} GiB",
                 f"{row['plan_bytes'] / GIB:.2f} GiB",
                 f"{row['plan_bytes'] / row['peak_bytes'] - 1:+.0%}"]
        if row is probe:
            cells += ["(probe)", "", f"{step:.1f} s", "(probe)", ""]
        else:
            cells += [f"{calibrated / GIB:.2f} GiB", f"{calibrated / row['peak_bytes'] - 1:+.0%}",
                      f"{step:.1f} s", f"{predicted:.1f} s", f"{predicted / step - 1:+.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Published GPU figures, planned with the settings each source states "
              "(gradient checkpointing; a fused or chunked loss keeps no fp32 logits; "
              "checkpointed layer inputs stay on the GPU; bf16 activations):", "",
              "| workload | published | planned | error | source |", "|---|---:|---:|---:|---|"]
    shape = load_llm_shape("llama-3-8b")
    for what, settings, published, source in PUBLISHED:
        total = llm_memory(shape, **settings).total_bytes
        lines.append(f"| {what} | {published / GIB:.2f} GiB | {total / GIB:.2f} GiB | "
                     f"{total / published - 1:+.0%} | {source} |")
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("llm-plan-accuracy", "## LLM planner against measured steps and "
                      "published figures\n\n" + body)


if __name__ == "__main__":
    main()
