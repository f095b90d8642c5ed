"""``entrena export`` for ``task: llm-sft``: the LoRA adapters merged into the base, written
as a GGUF file for llama.cpp / Ollama / LM Studio (``--format gguf``, with a ``Modelfile``)
or as a Hugging Face folder (``--format hf``), then checked.

GGUF: the merged model is saved as a Hugging Face folder and converted by llama.cpp's own
``convert_hf_to_gguf.py`` to f16 (:mod:`entrena.exporting.llama_converter`: every family
llama.cpp converts, the tokenizer and chat template from the folder), then quantised by
llama.cpp's quantiser; the file must hold the training chat template and stop token.

The check (``export.json`` ``parity``) runs the first ``parity_prompts`` held-out prompts
(the run's test file, rendered and cut as in training) through the PyTorch model and the
exports, all greedy (PyTorch in batches of similar length, llama.cpp one prompt at a time),
in two steps (``steps``): PyTorch against GGUF f16 (catches template, tokenizer and merge
bugs), then f16 against the quantised file (what quantising costs); ``hf`` is one step. Each
step and the headline (the shipped file against PyTorch) report:

- ``agreement``: the share of prompts whose generated token ids are equal (EOS included);
- ``exact_match_<engine>``: each one's exact match against the references (the task
  metric, :func:`~entrena.tasks.llm_sft.evaluation.normalise_answer`);
- ``tokenizer_agreement`` (GGUF): the share of prompts llama.cpp tokenizes to the training
  ids; ``throughput``: tokens per second of each engine, each as it ran (``note``).

A step into ``f16``, ``q8_0`` or ``hf`` passes with ``agreement >= MIN_AGREEMENT``; into
``q4_k_m`` it is reported, not judged (its drop in exact match is the figure to read).
``passed`` is every judged step's.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from entrena.errors import ConfigError, DataError

__all__ = ["MIN_AGREEMENT", "write_llm_bundle"]

log = logging.getLogger("entrena")

MIN_AGREEMENT = 0.95
"""Share of prompts whose greedy answers must be equal (issue 22's threshold for q8_0)."""
JUDGED = ("f16", "q8_0", "hf")
"""The exports held to :data:`MIN_AGREEMENT` against the step before them (``hf``: the
``--format hf`` folder); ``q4_k_m`` is reported."""
DISAGREEING_SHOWN = 3
"""Disagreeing answers a parity step shows decoded (``disagreeing_answers``)."""
GGUF_FILE = "model.gguf"
MODELFILE = "Modelfile"
_META_KEYS = ("format", "prompt_template", "response_column", "prompt_column",
              "completion_column", "messages_column", "system_prompt")


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


def _comparison(source: str, target: str, judged: bool, before: Any, after: Any,
                references: list[str], tokenizer: Any, eos: int) -> dict[str, Any]:
    """One parity step: the greedy answers of ``target`` against those of ``source`` (the
    share of prompts with equal ids) and each one's exact match against the references; the
    first :data:`DISAGREEING_SHOWN` answers that differ, decoded (special tokens kept)."""
    same = [a == b for a, b in zip(before.ids, after.ids, strict=True)]
    before_scores = _scores(before, references, tokenizer, eos)
    after_scores = _scores(after, references, tokenizer, eos)
    agreement = sum(same) / len(same)
    return {"from": source, "to": target, "agreement": agreement,
            f"exact_match_{source}": before_scores["exact_match"],
            f"exact_match_{target}": after_scores["exact_match"],
            "exact_match_drop": before_scores["exact_match"] - after_scores["exact_match"],
            f"eos_share_{source}": before_scores["eos_share"],
            f"eos_share_{target}": after_scores["eos_share"],
            "disagreeing_prompts": [i for i, s in enumerate(same) if not s][:20],
            "disagreeing_answers": [  # the first few, decoded: what differs, at a glance
                {"prompt": i, source: tokenizer.decode(before.ids[i]),
                 target: tokenizer.decode(after.ids[i])}
                for i in [i for i, s in enumerate(same) if not s][:DISAGREEING_SHOWN]],
            "criteria": (f"agreement >= {MIN_AGREEMENT}" if judged else
                         f"reported only ({target}: no threshold; read exact_match_drop)"),
            "passed": agreement >= MIN_AGREEMENT if judged else True}


def _parity(shipped: str, fmt: str, answers: dict[str, Any], references: list[str],
            tokenizer: Any, eos: int, dataset: str) -> dict[str, Any]:
    """``export.json`` ``parity``: the shipped file against PyTorch (the headline figures),
    and ``steps``: PyTorch → GGUF f16 (template, tokenizer and merge bugs), then f16 → the
    quantised file (what quantising costs); ``passed`` when every judged step passed.

    Args:
        shipped: The shipped file's name among ``answers``: the quantisation (``gguf``) or
            ``hf``.
        answers: The greedy :class:`~entrena.tasks.llm_sft.generators.Answers` of
            ``pytorch``, and of ``f16`` and the quantisation (``gguf``) or of ``hf``.
    """
    chain = ["pytorch", "f16", shipped] if fmt == "gguf" else ["pytorch", "hf"]
    chain = list(dict.fromkeys(chain))  # f16 shipped: one step
    steps = [_comparison(a, b, b in JUDGED, answers[a], answers[b], references, tokenizer, eos)
             for a, b in zip(chain, chain[1:], strict=False)]
    headline = _comparison("pytorch", shipped, shipped in JUDGED, answers["pytorch"],
                           answers[shipped], references, tokenizer, eos)
    parity = {"prompts": len(answers["pytorch"].ids), "dataset": dataset,
              "agreement": headline["agreement"],
              "exact_match_pytorch": headline["exact_match_pytorch"],
              f"exact_match_{fmt}": headline[f"exact_match_{shipped}"],
              "exact_match_drop": headline["exact_match_drop"],
              "eos_share_pytorch": headline["eos_share_pytorch"],
              f"eos_share_{fmt}": headline[f"eos_share_{shipped}"],
              "disagreeing_prompts": headline["disagreeing_prompts"],
              "steps": steps,
              "criteria": "; ".join(f"{s['from']} → {s['to']}: {s['criteria']}" for s in steps),
              "passed": all(s["passed"] for s in steps)}
    if fmt == "gguf":
        parity["tokenizer_agreement"] = sum(
            list(a) == list(b) for a, b in zip(answers["pytorch"].prompt_ids,
                                               answers[shipped].prompt_ids, strict=True)
        ) / parity["prompts"]
    return parity


def _conversion_folder(merged: Any, tokenizer: Any, folder: Path, stop: tuple[str, int]) -> None:
    """The merged model as a Hugging Face folder for llama.cpp's converter, its end-of-sequence
    token set to the training stop token (what the converter writes as the GGUF's EOS)."""
    import json

    from entrena.tasks.llm_sft.tokenizer import save_tokenizer

    merged.save_pretrained(folder, safe_serialization=True)
    save_tokenizer(tokenizer, folder)
    token, token_id = stop
    for name, key, value in (("tokenizer_config.json", "eos_token", token),
                             ("config.json", "eos_token_id", token_id),
                             ("generation_config.json", "eos_token_id", token_id)):
        path = folder / name
        if path.is_file():
            document = json.loads(path.read_text(encoding="utf-8"))
            document[key] = value
            path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def _checked_gguf(path: Path, chat_template: str, stop: tuple[str, int]) -> dict[str, Any]:
    """What the converter wrote that a chat needs: its architecture, the chat template and
    the stop token as end of generation.

    Raises:
        CheckFailed: The template or the stop token is missing from the file.
    """
    from entrena.errors import CheckFailed
    from entrena.exporting.gguf_reader import read_gguf_header

    fields = read_gguf_header(path).fields

    def value(key: str) -> Any:
        return fields[key].value if key in fields else None

    template = value("tokenizer.chat_template")
    ends = {value("tokenizer.ggml.eos_token_id"), value("tokenizer.ggml.eot_token_id")}
    if template != chat_template:
        raise CheckFailed(f"{path.name}: llama.cpp's converter did not embed the training chat "
                          f"template (found {str(template)[:60]!r}); the file would chat "
                          f"differently from training")
    if stop[1] not in ends:
        raise CheckFailed(f"{path.name}: the training stop token {stop[0]!r} (id {stop[1]}) "
                          f"is not the file's end of generation ({sorted(map(str, ends))})")
    return {"architecture": value("general.architecture"),
            "pre_tokenizer": value("tokenizer.ggml.pre"),
            "tokenizer_model": value("tokenizer.ggml.model")}


def _write_gguf(merged: Any, tokenizer: Any, work: Path, request: Any, stop: tuple[str, int],
                context_tokens: int, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Convert (llama.cpp's converter → f16) and quantise into ``work/model.gguf``, with the
    Modelfile; returns the manifest's GGUF part and the generators to check (``f16`` and
    the shipped quantisation), each loaded when first asked for."""
    from entrena.exporting.gguf_reader import tensor_types
    from entrena.exporting.llama_converter import convert_hf_folder, converter_tree, gguf_model_name
    from entrena.exporting.llama_runtime import MAIN_TYPES, quantize_gguf
    from entrena.exporting.modelfile import chat_structure, render_modelfile
    from entrena.exporting.ollama import gguf_adds_bos
    from entrena.tasks.llm_sft.generators import GgufGenerator

    quantize = request.quantize
    structure = chat_structure(tokenizer)  # refuses a template Ollama cannot mirror
    tree = converter_tree()
    hf_folder = work.with_name(work.name + "-hf")
    f16 = work / (GGUF_FILE if quantize == "f16" else "model-f16.gguf")
    try:
        _conversion_folder(merged, tokenizer, hf_folder, stop)
        convert_s = convert_hf_folder(
            hf_folder, f16, outtype="f16", tree=tree,
            model_name=gguf_model_name(name, str(getattr(merged.config, "model_type", ""))))
    finally:
        shutil.rmtree(hf_folder, ignore_errors=True)
    found = _checked_gguf(f16, tokenizer.chat_template, stop)
    quantize_s = 0.0
    if quantize != "f16":
        quantize_s = quantize_gguf(f16, work / GGUF_FILE, quantize, threads=request.threads)
    types = tensor_types(work / GGUF_FILE)
    (work / MODELFILE).write_text(render_modelfile(
        structure, stop=[stop[0]], add_bos=gguf_adds_bos(work / GGUF_FILE)), encoding="utf-8")
    part = {"file": GGUF_FILE, "program": f"llama.cpp convert_hf_to_gguf.py ({tree.name})",
            "gguf": found,
            "quantization": {"requested": quantize, "tensor_types": types,
                             "fallback": sorted(set(types) - set(MAIN_TYPES[quantize])
                                                - {"F32"}),
                             "convert_s": convert_s, "quantize_s": quantize_s},
            "chat_template": tokenizer.chat_template, "stop_tokens": [stop[0]],
            "eos_token_id": stop[1], "modelfile": MODELFILE,
            "ollama": {"system": structure.default_system,
                       "caveats": list(structure.caveats)}}
    engines = {"f16": lambda: GgufGenerator(f16, context_tokens=context_tokens,
                                            threads=request.threads),
               quantize: lambda: GgufGenerator(work / GGUF_FILE, context_tokens=context_tokens,
                                               threads=request.threads)}
    return part, engines


def write_llm_bundle(run: Any, request: Any) -> dict[str, Any]:
    """Write and check the bundle (module docstring); returns ``export.json``'s content.

    Args:
        run: The finished run (:class:`~entrena.exporting.bundle.RunModel`).
        request: The :class:`~entrena.exporting.bundle.ExportRequest` (format ``gguf`` or
            ``hf``; ``quantize`` ``f16``/``q8_0``/``q4_k_m`` for GGUF).

    Raises:
        DataError: No parity rows; llama.cpp's converter refuses the model (``gguf``: an
            unknown pre-tokenizer or architecture, named with the fix).
        ResourceError: llama-cpp-python is missing (``gguf``; checked before loading).
    """
    import json

    import torch

    from entrena.exporting.bundle import META_FILE, finish_bundle, versions
    from entrena.tasks.llm_sft.card import llm_model_card
    from entrena.tasks.llm_sft.generators import BATCH_SIZE, TorchGenerator
    from entrena.tasks.llm_sft.model import load_sft_model
    from entrena.tasks.llm_sft.tokenizer import padding_id, save_tokenizer
    from entrena.tasks.llm_sft.tokens import tokenize_example

    fmt, quantize = request.format.name, request.quantize
    shipped = quantize if fmt == "gguf" else "hf"
    if shipped is None:
        raise ConfigError("--quantize: a GGUF export needs a quantisation and none was given; "
                          "pass --quantize q8_0 (the default), q4_k_m or f16")
    if fmt == "gguf":
        from entrena.exporting.llama_converter import converter_tree
        from entrena.exporting.llama_runtime import require_runtime

        require_runtime("--format gguf")
        converter_tree()  # fetched (or refused) before the model is loaded
    if request.threads:
        torch.set_num_threads(int(request.threads))
    model, tokenizer, meta = load_sft_model(run.paths.model)
    if fmt == "gguf":
        from entrena.exporting.llama_converter import check_llama_cpp_computes_alike

        check_llama_cpp_computes_alike(model.causal_lm.config)
    examples, dataset = parity_examples(run, request.parity_data, meta, request.parity_prompts)
    limit, budget = int(meta["max_length"]), int(meta["max_new_tokens"])
    rendered = [tokenize_example(tokenizer, e, limit, template=meta.get("prompt_template"))
                for e in examples]
    prompts = [r[0] for r in rendered]
    prompt_ids = [r[1][:r[2]] for r in rendered]
    eos, pad = int(tokenizer.eos_token_id), padding_id(tokenizer)
    stop = (str(tokenizer.eos_token), eos)
    log.info("parity: %d prompts through PyTorch", len(prompts))
    answers = {"pytorch": TorchGenerator(model.lm, eos_token_id=eos, pad_token_id=pad).generate(
        prompts, prompt_ids, budget)}

    work = request.destination.with_name(f".{request.destination.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        started = time.perf_counter()
        merged = _merged(model).eval()
        pytorch_bytes = sum(p.numel() * p.element_size() for p in merged.parameters())
        bundle_meta = {**meta, "finetuning": "full", "base_model": None,
                       "merged_from": meta.get("finetuning")}
        manifest: dict[str, Any] = {"format": fmt, "quantize": quantize,
                                    "run": str(run.paths.root), "task": "llm-sft",
                                    "exporter": versions()}
        save_tokenizer(tokenizer, work)
        if fmt == "gguf":
            part, engines = _write_gguf(merged, tokenizer, work, request, stop,
                                        max(2048, limit + budget),
                                        str(run.config.get("name") or run.paths.root.name))
            manifest.update(part)
        else:
            merged.save_pretrained(work, safe_serialization=True)
            manifest.update({"file": "model.safetensors", "program": "hugging face (merged)",
                             "chat_template": tokenizer.chat_template,
                             "stop_tokens": [stop[0]], "eos_token_id": eos})
            engines = {"hf": lambda: TorchGenerator(_reloaded(work), eos_token_id=eos,
                                                    pad_token_id=pad)}
        del merged
        (work / META_FILE).write_text(json.dumps(bundle_meta, indent=2) + "\n",
                                      encoding="utf-8")
        manifest["write_s"] = time.perf_counter() - started
        for name, engine in engines.items():
            log.info("parity: %d prompts through the %s export", len(prompts), name)
            answers[name] = engine().generate(prompts, prompt_ids, budget)
        (work / "model-f16.gguf").unlink(missing_ok=True)  # only the shipped file stays
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest["parity"] = _parity(shipped, fmt, answers, [e.response for e in examples],
                                 tokenizer, eos, dataset)
    manifest["throughput"] = {
        **{name: a.throughput() for name, a in answers.items() if name in ("pytorch", shipped)},
        "threads": torch.get_num_threads(),
        "note": f"greedy; pytorch in batches of up to {BATCH_SIZE} prompts, {fmt} "
                + ("one prompt at a time" if fmt == "gguf" else
                   f"in batches of up to {BATCH_SIZE} prompts")}
    if fmt == "gguf":  # the throughput's keys as before: pytorch and the format
        manifest["throughput"][fmt] = manifest["throughput"].pop(shipped)
    model_file = work / manifest["file"]
    manifest["size_bytes"] = {"model_file": model_file.stat().st_size,
                              "pytorch_weights": pytorch_bytes}
    finish_bundle(work, request.destination, manifest, lambda m: llm_model_card(run, m))
    return manifest


def _reloaded(folder: Path) -> Any:
    """The exported ``hf`` folder loaded again, as a user of it would."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
