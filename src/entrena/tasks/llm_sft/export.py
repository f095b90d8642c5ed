"""``entrena export`` for ``task: llm-sft``: the LoRA adapters merged into the base, written
as a GGUF file for llama.cpp / Ollama / LM Studio (``--format gguf``, with a ``Modelfile``)
or as a Hugging Face folder (``--format hf``), then checked.

The check (``export.json`` ``parity``) runs the first ``parity_prompts`` held-out prompts
(the run's test file, rendered and cut as in training) through the PyTorch model and the
exported one, both greedy (PyTorch in batches of similar length, llama.cpp one prompt at a
time), and reports:

- ``agreement``: the share of prompts whose generated token ids are equal (EOS included);
- ``exact_match_pytorch`` / ``exact_match_<format>``: each one's exact match against the
  references (the task metric, :func:`~entrena.tasks.llm_sft.evaluation.normalise_answer`);
- ``tokenizer_agreement`` (GGUF): the share of prompts llama.cpp tokenizes to the training
  ids; ``throughput``: tokens per second of each engine, each as it ran (``note``).

``f16``, ``q8_0`` and ``hf`` pass with ``agreement >= MIN_AGREEMENT``; ``q4_k_m`` is
reported, not judged (its drop in exact match is the figure to read).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from entrena.errors import DataError

__all__ = ["MIN_AGREEMENT", "write_llm_bundle", "tokenizer_gguf"]

log = logging.getLogger("entrena")

MIN_AGREEMENT = 0.95
"""Share of prompts whose greedy answers must be equal (issue 22's threshold for q8_0)."""
JUDGED = ("f16", "q8_0", None)
"""Quantisations held to :data:`MIN_AGREEMENT` (``None``: the ``hf`` format)."""
GGUF_FILE = "model.gguf"
MODELFILE = "Modelfile"
_META_KEYS = ("format", "prompt_template", "response_column", "prompt_column",
              "completion_column", "messages_column", "system_prompt")


def tokenizer_gguf(config: dict[str, Any]) -> Path:
    """The GGUF file the run's tokenizer came from (its ``model.tokenizer`` or
    ``model.name``: an alias, or a folder entrena converted from one), whose tokenizer
    key/values the export copies.

    Raises:
        DataError: The run's model did not come from a GGUF alias.
    """
    import re

    from entrena.config.models import MODEL_ALIASES
    from entrena.tasks.llm_sft.sources import file_digest

    model = config.get("model", {})
    for key in ("tokenizer", "name"):
        value = str(model.get(key))
        alias = MODEL_ALIASES.get(value)
        if alias is not None and alias.kind == "causal-lm" and alias.path().is_file():
            return alias.path()
        # A folder entrena converted from an alias: <cache>/models/<alias>-<sha16>[-tokenizer]
        found = re.fullmatch(r"(.+)-([0-9a-f]{16})(-tokenizer)?", Path(value).name)
        alias = MODEL_ALIASES.get(found.group(1)) if found else None
        if alias is not None and alias.kind == "causal-lm" and alias.path().is_file() and \
                file_digest(alias.path())[:16] == found.group(2):
            return alias.path()
    raise DataError(f"--format gguf copies the tokenizer of the GGUF file the base model came "
                    f"from, and this run's model ({model.get('name') or model.get('tokenizer')}"
                    f") did not come from one (a GGUF alias such as smollm2-135m); use --format "
                    f"hf and llama.cpp's convert_hf_to_gguf.py")


def parity_examples(run: Any, parity_data: Any, meta: dict[str, Any],
                    count: int) -> tuple[list[Any], str]:
    """The first ``count`` examples (prompt turns and reference response) of the parity
    file, and the dataset's name."""
    from entrena.exporting.bundle import parity_source
    from entrena.tasks.llm_sft.chats import read_rows, row_examples

    path, dataset = parity_source(run, parity_data, "rows in the run's data format")
    suffix = Path(path).suffix.lower()
    fmt = {".jsonl": "jsonl", ".parquet": "parquet"}.get(suffix, "csv")
    rows = read_rows(Path(path), path, fmt, key="--parity-data", encoding="utf-8",
                     delimiter="\t" if suffix == ".tsv" else ",")
    data = SimpleNamespace(**{k: meta.get(k) for k in _META_KEYS[1:]})
    examples, _ = row_examples(rows, data, meta["format"], name=path, key="--parity-data",
                               on_bad_rows="skip")
    if not examples:
        raise DataError(f"--parity-data {path}: no row with a response to compare against")
    return examples[:count], dataset


def _merged(model: Any) -> Any:
    """The plain causal LM with the adapters added into its weights (in place)."""
    merge = getattr(model.lm, "merge_and_unload", None)
    return merge() if merge is not None else model.causal_lm


def _scores(answers: Any, references: list[str], tokenizer: Any, eos: int) -> dict[str, float]:
    from entrena.tasks.llm_sft.evaluation import normalise_answer

    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in answers.ids]
    match = [normalise_answer(t) == normalise_answer(r)
             for t, r in zip(texts, references, strict=True)]
    return {"exact_match": sum(match) / len(match),
            "eos_share": sum(eos in ids for ids in answers.ids) / len(answers.ids)}


def _parity(request: Any, quantize: str | None, fmt: str, reference: Any, exported: Any,
            references: list[str], tokenizer: Any, dataset: str) -> dict[str, Any]:
    eos = int(tokenizer.eos_token_id)
    same = [a == b for a, b in zip(reference.ids, exported.ids, strict=True)]
    torch_scores = _scores(reference, references, tokenizer, eos)
    out_scores = _scores(exported, references, tokenizer, eos)
    agreement = sum(same) / len(same)
    judged = quantize in JUDGED
    parity = {"prompts": len(same), "dataset": dataset, "agreement": agreement,
              "exact_match_pytorch": torch_scores["exact_match"],
              f"exact_match_{fmt}": out_scores["exact_match"],
              "exact_match_drop": torch_scores["exact_match"] - out_scores["exact_match"],
              "eos_share_pytorch": torch_scores["eos_share"],
              f"eos_share_{fmt}": out_scores["eos_share"],
              "disagreeing_prompts": [i for i, s in enumerate(same) if not s][:20],
              "criteria": (f"agreement >= {MIN_AGREEMENT}" if judged else
                           f"reported only ({quantize}: no threshold; read exact_match_drop)"),
              "passed": agreement >= MIN_AGREEMENT if judged else True}
    if fmt == "gguf":
        parity["tokenizer_agreement"] = sum(
            list(a) == list(b) for a, b in zip(reference.prompt_ids, exported.prompt_ids,
                                               strict=True)) / len(same)
    return parity


def write_llm_bundle(run: Any, request: Any) -> dict[str, Any]:
    """Write and check the bundle (module docstring); returns ``export.json``'s content.

    Args:
        run: The finished run (:class:`~entrena.exporting.bundle.RunModel`).
        request: The :class:`~entrena.exporting.bundle.ExportRequest` (format ``gguf`` or
            ``hf``; ``quantize`` ``f16``/``q8_0``/``q4_k_m`` for GGUF).

    Raises:
        DataError: The run's base did not come from a GGUF file (``gguf``), no parity rows.
        ResourceError: llama-cpp-python is missing (``gguf``; checked before loading).
    """
    import json

    import torch

    from entrena.exporting.bundle import META_FILE, finish_bundle, versions
    from entrena.tasks.llm_sft.card import llm_model_card
    from entrena.tasks.llm_sft.generators import BATCH_SIZE, GgufGenerator, TorchGenerator
    from entrena.tasks.llm_sft.model import _pad_id, load_sft_model
    from entrena.tasks.llm_sft.tokens import tokenize_example

    fmt, quantize = request.format.name, request.quantize
    source_gguf = None
    if fmt == "gguf":
        from entrena.exporting.llama_runtime import require_runtime

        require_runtime("--format gguf")
        source_gguf = tokenizer_gguf(run.config)
    if request.threads:
        torch.set_num_threads(int(request.threads))
    model, tokenizer, meta = load_sft_model(run.paths.model)
    examples, dataset = parity_examples(run, request.parity_data, meta, request.parity_prompts)
    limit, budget = int(meta["max_length"]), int(meta["max_new_tokens"])
    rendered = [tokenize_example(tokenizer, e, limit, template=meta.get("prompt_template"))
                for e in examples]
    prompts = [r[0] for r in rendered]
    prompt_ids = [r[1][:r[2]] for r in rendered]
    eos, pad = int(tokenizer.eos_token_id), _pad_id(tokenizer)
    log.info("parity: %d prompts through PyTorch", len(prompts))
    reference = TorchGenerator(model.lm, eos_token_id=eos, pad_token_id=pad).generate(
        prompts, prompt_ids, budget)

    work = request.destination.with_name(f".{request.destination.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    merged = _merged(model).eval()
    pytorch_bytes = sum(p.numel() * p.element_size() for p in merged.parameters())
    bundle_meta = {**meta, "finetuning": "full", "base_model": None,
                   "merged_from": meta.get("finetuning")}
    manifest: dict[str, Any] = {"format": fmt, "quantize": quantize, "run": str(run.paths.root),
                                "task": "llm-sft", "exporter": versions()}
    tokenizer.save_pretrained(work)
    if fmt == "gguf":
        from entrena.exporting.gguf_writer import tensor_types, write_llama_gguf
        from entrena.exporting.llama_runtime import MAIN_TYPES, quantize_gguf
        from entrena.exporting.modelfile import chat_structure, render_modelfile
        from entrena.exporting.ollama import gguf_adds_bos

        structure = chat_structure(tokenizer)  # refuses a template Ollama cannot mirror
        full = work / "model-f32.gguf"
        written = write_llama_gguf(merged, full, tokenizer_gguf=source_gguf,
                                   chat_template=tokenizer.chat_template, eos_token_id=eos,
                                   name=str(run.config.get("name", run.paths.root.name)))
        quantize_s = quantize_gguf(full, work / GGUF_FILE, quantize, threads=request.threads)
        full.unlink()
        types = tensor_types(work / GGUF_FILE)
        stop = [tokenizer.eos_token]
        (work / MODELFILE).write_text(render_modelfile(
            structure, stop=stop, add_bos=gguf_adds_bos(work / GGUF_FILE)), encoding="utf-8")
        manifest.update({
            "file": GGUF_FILE, "program": "gguf (llama architecture)",
            "quantization": {"requested": quantize, "tensor_types": types,
                             "fallback": sorted(set(types) - set(MAIN_TYPES[quantize])
                                                - {"F32"}),
                             "quantize_s": quantize_s},
            "tensors": written["tensors"], "parameters": written["parameters"],
            "tokenizer_keys_from": str(source_gguf), "chat_template": tokenizer.chat_template,
            "stop_tokens": stop, "eos_token_id": eos, "modelfile": MODELFILE,
            "ollama": {"system": structure.default_system,
                       "caveats": list(structure.caveats)}})
        del merged
        exported = GgufGenerator(work / GGUF_FILE, context_tokens=max(2048, limit + budget),
                                 threads=request.threads)
    else:
        merged.save_pretrained(work, safe_serialization=True)
        manifest.update({"file": "model.safetensors", "program": "hugging face (merged)",
                         "chat_template": tokenizer.chat_template,
                         "stop_tokens": [tokenizer.eos_token], "eos_token_id": eos})
        del merged
        from transformers import AutoModelForCausalLM

        again = AutoModelForCausalLM.from_pretrained(work, dtype=torch.float32).eval()
        exported = TorchGenerator(again, eos_token_id=eos, pad_token_id=pad)
    (work / META_FILE).write_text(json.dumps(bundle_meta, indent=2) + "\n", encoding="utf-8")
    manifest["write_s"] = time.perf_counter() - started
    log.info("parity: %d prompts through the %s export", len(prompts), fmt)
    answers = exported.generate(prompts, prompt_ids, budget)
    manifest["parity"] = _parity(request, quantize, fmt, reference, answers,
                                 [e.response for e in examples], tokenizer, dataset)
    manifest["throughput"] = {"pytorch": reference.throughput(), fmt: answers.throughput(),
                              "threads": torch.get_num_threads(),
                              "note": f"greedy; pytorch in batches of up to "
                                      f"{BATCH_SIZE} prompts, {fmt} "
                                      + ("one prompt at a time" if fmt == "gguf" else
                                         f"in batches of up to {BATCH_SIZE} prompts")}
    model_file = work / manifest["file"]
    manifest["size_bytes"] = {"model_file": model_file.stat().st_size,
                              "pytorch_weights": pytorch_bytes}
    finish_bundle(work, request.destination, manifest, lambda m: llm_model_card(run, m))
    return manifest

