"""entrena's ``task: llm-sft`` against TRL's ``SFTTrainer`` + PEFT, side by side (issue 21).

Same model (SmolLM2-135M-Instruct, the fp32 copy entrena converts into its cache), same
examples (the reviews-chat example's chats: ``examples/reviews-chat/config.yaml`` with a
training subsample, tokenized once by entrena's preparation and handed to TRL as token ids
with a completion mask, so both sides see identical tokens), same LoRA settings (the
config's: r 16, alpha 32, dropout 0, all linear layers), sequence limit
(``model.max_length``), fp32, batch size, AdamW (learning rate, linear schedule with 10%
warmup, weight decay 0.01, gradient clipping at 1.0), one epoch, no gradient checkpointing, loss on the response and
its EOS only in both. TRL otherwise runs with its defaults (random batches, padding to the
longest of the batch, no packing); ``--trl-sampler group_by_length`` gives it length
grouping too.

Measured per run, in a fresh process each: the training wall time (entrena: fit start to
fit end minus evaluation, checkpoint writing included; TRL: ``on_train_begin`` to
``on_train_end`` with evaluation and saving off) and, afterwards, the validation loss (mean
NLL per target token over the same validation chats, computed by one function of this file
for both). Both sides train on the same examples, so they see the same tokens: the tokens/s
figures count every non-pad token (prompt + response + EOS) and, beside them, the target
tokens (response + EOS); their ratio is the same either way. Runs alternate E T, T E, …
so that load from other jobs hits both; the figures are medians of per-pair ratios.

Usage::

    python benchmarks/experiments/llm_trl.py                  # 3 pairs, 160 chats: 35 min, 2 AVX2 cores
    python benchmarks/experiments/llm_trl.py --quick          # 3 pairs, 32 chats
    python benchmarks/experiments/llm_trl.py --trl-sampler group_by_length
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import load_text, machine, today, write_section  # noqa: E402
from _stats import goal_text, ratios, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"
GOAL = 1.3
"""Issue 21: entrena at least 1.3 times TRL's training tokens/s at equal loss."""


def overrides(spec: dict[str, Any]) -> list[str]:
    """The ``--set`` values both sides' data preparation (and entrena's run) use."""
    return [f"data.max_train_samples={spec['train']}",
            f"data.max_eval_samples={spec['validation']}", "data.test=null",
            f"train.batch_size={spec['batch_size']}", f"train.num_threads={spec['threads']}",
            "train.precision=32-true", "train.early_stopping.enabled=false",
            "train.gradient_clip_norm=1.0", "train.weight_decay=0.01",
            "tracking.enabled=false", *spec.get("extra", [])]


def prepared_data(spec: dict[str, Any]) -> tuple[Any, Any]:
    """``(loaded config, prepared data)`` as entrena's ``train`` prepares them."""
    from entrena.tasks.llm_sft.task import LlmSftTask
    from entrena.tasks.registry import load_config

    loaded = load_config(CONFIG, overrides(spec))
    task = LlmSftTask()
    return loaded, task.prepare(loaded, task.model_sources(loaded))


def validation_loss(lm: Any, split: Any, pad_id: int, batch_size: int = 16) -> float:
    """Mean NLL (nats) per target token of ``split`` under ``lm`` (eval mode, no grad).

    Args:
        lm: A Hugging Face causal LM or a PEFT model around one.
        split: An ``SftSplit`` (token ids and prompt lengths).
        pad_id: The id in padding slots (masked).
    """
    import torch

    from entrena.tasks.llm_sft.batches import SftBatches

    source = SftBatches(split, batch_size=batch_size, pad_id=pad_id,
                        reference_width=int(split.response_lengths.max()),
                        shuffle=False)
    lm.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for indices in source.plan(0):
            batch = source.collate(indices)
            logits = lm(input_ids=batch["input_ids"],
                        attention_mask=batch["attention_mask"]).logits  # (B, T, V)
            targets = batch["target_mask"][:, 1:].bool()
            nll = torch.nn.functional.cross_entropy(
                logits[:, :-1][targets].float(), batch["input_ids"][:, 1:][targets],
                reduction="sum")
            total += float(nll)
            count += int(targets.sum())
    return total / count


def token_counts(split: Any) -> dict[str, int]:
    return {"tokens": int(split.lengths.sum()), "target_tokens": int(split.response_lengths.sum())}


def run_entrena(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``entrena train`` of the config, timed by a callback."""
    import entrena
    from entrena.core.callback import Callback
    from entrena.tasks.llm_sft.model import load_sft_model
    from entrena.tasks.llm_sft.tokenizer import padding_id

    class Clock(Callback):
        def __init__(self) -> None:
            self.start = self.end = 0.0
            self.eval_s = 0.0
            self._eval_from = 0.0

        def on_fit_start(self, state: Any) -> None:
            self.start = time.perf_counter()

        def on_eval_start(self, state: Any) -> None:
            self._eval_from = time.perf_counter()

        def on_eval_end(self, state: Any) -> None:
            self.eval_s += time.perf_counter() - self._eval_from

        def on_fit_end(self, state: Any) -> None:
            self.end = time.perf_counter()

    clock = Clock()
    with tempfile.TemporaryDirectory() as folder:
        result = entrena.train(CONFIG, run_dir=Path(folder) / "run", overrides=overrides(spec),
                               callbacks=[clock])
        model, tokenizer, _ = load_sft_model(Path(folder) / "run" / "model")
        _, prepared = prepared_data(spec)
        loss = validation_loss(model.lm, prepared.splits.validation, padding_id(tokenizer))
    fit = result.metrics["fit"]
    return {"train_wall_s": clock.end - clock.start - clock.eval_s,
            "steps": fit["steps"], "validation_loss": loss,
            "entrena_validation_loss": result.metrics["validation"]["loss"],
            "padding_fraction": fit.get("padding_fraction"),
            **token_counts(prepared.splits.train)}


def run_trl(spec: dict[str, Any]) -> dict[str, Any]:
    """One TRL ``SFTTrainer`` fit on the same token ids."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from entrena.tasks.llm_sft.model import lora_config
    from entrena.tasks.llm_sft.task import LlmSftTask, weights_source
    from entrena.tasks.llm_sft.tokenizer import padding_id

    torch.set_num_threads(spec["threads"])
    loaded, prepared = prepared_data(spec)
    cfg = loaded.config
    train = prepared.splits.train
    rows = {"input_ids": [ids.tolist() for ids in train.input_ids],
            "completion_mask": [[0] * int(p) + [1] * (len(ids) - int(p))
                                for ids, p in zip(train.input_ids, train.prompt_lengths,
                                                  strict=True)]}
    tokenizer = prepared.tokenizer
    folder = weights_source(loaded, LlmSftTask().model_sources(loaded))
    torch.manual_seed(cfg.train.seed)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)

    class Clock(TrainerCallback):
        start = end = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.end = time.perf_counter()

    clock = Clock()
    with tempfile.TemporaryDirectory() as folder_out:
        args = SFTConfig(
            output_dir=folder_out, per_device_train_batch_size=cfg.train.batch_size,
            num_train_epochs=cfg.train.max_epochs, learning_rate=cfg.train.learning_rate,
            lr_scheduler_type="linear", warmup_steps=warmup_steps(cfg, len(train)),
            weight_decay=cfg.train.weight_decay, max_grad_norm=cfg.train.gradient_clip_norm,
            bf16=False, fp16=False, use_cpu=True, gradient_checkpointing=False,
            max_length=cfg.model.max_length, completion_only_loss=True, packing=False,
            eval_strategy="no", save_strategy="no", report_to=[], logging_steps=10_000,
            seed=cfg.train.seed, dataloader_num_workers=0, disable_tqdm=True,
            train_sampling_strategy=spec["trl_sampler"])
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_dict(rows),
                             processing_class=tokenizer,
                             peft_config=lora_config(cfg.model.lora.model_dump()),
                             callbacks=[clock])
        labelled = sum(sum(1 for t in row if t != -100) for row in trainer.train_dataset["labels"])
        if labelled != token_counts(train)["target_tokens"]:
            raise RuntimeError(f"TRL learns {labelled} tokens, entrena "
                               f"{token_counts(train)['target_tokens']}: not the same task")
        trainer.train()
        loss = validation_loss(trainer.model, prepared.splits.validation, padding_id(tokenizer))
    return {"train_wall_s": clock.end - clock.start, "steps": trainer.state.global_step,
            "validation_loss": loss, **token_counts(train)}


def warmup_steps(cfg: Any, examples: int) -> int:
    """Warmup steps as entrena counts them (``round(fraction x steps)``; a fractional
    ``warmup_steps`` makes TRL round up instead)."""
    import math

    steps = math.ceil(examples / cfg.train.batch_size) * cfg.train.max_epochs
    return int(round(cfg.train.warmup_fraction * steps))


def child(side: str, spec: dict[str, Any]) -> dict[str, Any]:
    return run_entrena(spec) if side == "entrena" else run_trl(spec)


def run_side(side: str, spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", side, json.dumps(spec)],
                          capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"{side} run failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(spec: dict[str, Any], pairs: list[dict[str, dict[str, Any]]],
           load: list[float]) -> tuple[str, str]:
    """``(one-line summary, doc section body)``."""
    speed = ratios([p["trl"]["train_wall_s"] for p in pairs],
                   [p["entrena"]["train_wall_s"] for p in pairs])
    e_loss = [p["entrena"]["validation_loss"] for p in pairs]
    t_loss = [p["trl"]["validation_loss"] for p in pairs]
    first = pairs[0]["entrena"]
    tokens, targets = first["tokens"], first["target_tokens"]

    def rate(side: str, count: int) -> str:
        return summary([count / p[side]["train_wall_s"] for p in pairs],
                       "{:,.0f}" if count > 100 * len(pairs) else "{:,.2f}")

    def wall(side: str) -> str:
        return summary([p[side]["train_wall_s"] for p in pairs], unit=" s")

    line = (f"entrena/TRL tokens/s {statistics.median(speed):.2f}x "
            f"(pairs {', '.join(f'{r:.2f}' for r in speed)}); validation loss entrena "
            f"{statistics.median(e_loss):.4f}, TRL {statistics.median(t_loss):.4f}; goal "
            f"{goal_text(statistics.median(speed), GOAL, 'x')}; load "
            f"{min(load):.1f}-{max(load):.1f}")
    body = [f"{today()}, {machine()}; {load_text(load)}.", "",
            f"`{spec['command']}`: {spec['train']} training chats ({tokens:,} tokens, "
            f"{targets:,} of them targets: response + EOS), {spec['validation']} validation "
            f"chats, batch {spec['batch_size']}, {first['steps']} steps, "
            f"{spec['threads']} torch thread(s), TRL sampler `{spec['trl_sampler']}`; "
            f"{len(pairs)} alternated pairs, each run in a fresh process.", "",
            "| | entrena | TRL SFTTrainer |", "|---|---:|---:|",
            f"| training wall time | {wall('entrena')} | {wall('trl')} |",
            f"| tokens/s (all non-pad tokens) | {rate('entrena', tokens)} "
            f"| {rate('trl', tokens)} |",
            f"| target tokens/s | {rate('entrena', targets)} | {rate('trl', targets)} |",
            f"| validation loss (nats per target token) | {summary(e_loss, '{:.4f}')} "
            f"| {summary(t_loss, '{:.4f}')} |", "",
            f"entrena / TRL tokens/s, median of the pairs' ratios: "
            f"**{summary(speed, unit='×')}**; goal {GOAL}×: "
            f"{goal_text(statistics.median(speed), GOAL, '×')}."]
    return line, "\n".join(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--train", type=int, default=160, help="training chats")
    parser.add_argument("--validation", type=int, default=64, help="validation chats")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per run (1: on a shared machine two threads wait "
                             "on each other)")
    parser.add_argument("--trl-sampler", default="random",
                        choices=["random", "group_by_length"])
    parser.add_argument("--quick", action="store_true",
                        help="32 training chats, 32 validation chats")
    parser.add_argument("--set", action="append", default=[], dest="extra",
                        metavar="KEY=VALUE", help="an entrena --set value for both sides' data "
                        "and entrena's run (model.shared_prefix=false, data.packing=true)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], json.loads(args.child[1]))))
        return
    if args.quick:
        args.train, args.validation = 32, 32
    command = "python " + " ".join(["benchmarks/experiments/llm_trl.py", *sys.argv[1:]])
    spec = {"train": args.train, "validation": args.validation, "batch_size": args.batch_size,
            "threads": args.threads, "trl_sampler": args.trl_sampler, "command": command,
            "extra": args.extra}
    load = [os.getloadavg()[0]]
    pairs = []
    for index in range(args.pairs):
        order = ("entrena", "trl") if index % 2 == 0 else ("trl", "entrena")
        pair = {}
        for side in order:
            pair[side] = run_side(side, spec)
            load.append(os.getloadavg()[0])
            print(f"pair {index + 1} {side}: {pair[side]['train_wall_s']:.1f} s, validation "
                  f"loss {pair[side]['validation_loss']:.4f}", flush=True)
        pairs.append(pair)
    line, body = report(spec, pairs, load)
    print(body, "", line, sep="\n")
    if not args.no_write:
        write_section("llm-trl", "## entrena against TRL's SFTTrainer (LoRA, SmolLM2-135M)\n\n"
                      + body)


if __name__ == "__main__":
    main()
