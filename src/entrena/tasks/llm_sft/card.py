"""The model card (``MODEL_CARD.md``) of an ``llm-sft`` bundle: base model, data, metrics,
the export's format, quantisation, chat template, stop tokens and its parity figures."""

from __future__ import annotations

from typing import Any

from entrena.exporting.card import pct
from entrena.units import format_bytes

__all__ = ["llm_model_card"]


def _base_line(source: dict[str, Any] | None) -> str:
    """Where the base model came from (``entrena_model.json``'s ``base_source``), as a
    sentence starting on a new line, or nothing for a folder, a hub id or a built model."""
    if not source:
        return ""
    digest = str(source.get("digest", ""))[:19]
    what = {"ollama": f"the Ollama model `{source.get('name')}`",
            "alias": f"the alias `{source.get('name')}`"}.get(
        str(source.get("kind")), f"the GGUF file `{source.get('path')}`")
    return f"\nThe base model is {what} (GGUF `{digest}…`)."


def llm_model_card(run: Any, manifest: dict[str, Any]) -> str:
    """The card as Markdown.

    Args:
        run: The run the model comes from (config, metrics).
        manifest: The bundle's ``export.json`` content.
    """
    config, metrics = run.config, run.metrics
    model = config.get("model", {})
    parity = manifest["parity"]
    fmt = manifest["format"]
    test = metrics.get("test", {})
    zero = metrics.get("baseline", {}).get("zero_shot", {}).get("test", {})
    quant = manifest.get("quantization") or {}
    types = ", ".join(f"{name} {count}" for name, count in quant.get("tensor_types", {}).items())
    throughput = manifest.get("throughput", {})
    speed = "; ".join(f"{engine} {figures['tokens_per_s']:.0f} tokens/s"
                      for engine, figures in throughput.items() if isinstance(figures, dict))
    steps = "; ".join(f"{s['from']} → {s['to']} agreement {pct(s['agreement'])} "
                      f"(`{s['criteria']}`)" for s in parity.get("steps", []))
    sizes = manifest["size_bytes"]
    how = ("`ollama create NAME -f Modelfile`, then `ollama run NAME`; or llama.cpp "
           "(`llama-cli -m model.gguf`), LM Studio, `entrena predict` / `entrena chat` on this "
           "folder" if fmt == "gguf" else
           "`transformers` (`AutoModelForCausalLM.from_pretrained(folder)`), `entrena "
           "predict` / `entrena chat` on this folder")
    return f"""# Model card: {config.get('name', run.paths.root.name)}

## Task
A chat model: `{model.get('name') or 'a Llama built from model.architecture'}` adapted with
`{model.get('finetuning', 'lora')}` fine-tuning (adapters merged into the weights of this export)
to answer prompts like its training data's, greedily, in at most {run.meta.get('max_new_tokens')}
tokens.{_base_line(run.meta.get("base_source"))}

## Metrics (from `metrics.json`, the PyTorch model)
- test exact match {pct(test.get('exact_match'))} (zero-shot base model
  {pct(zero.get('exact_match'))}); answers ending with EOS {pct(test.get('eos_share'))}

## This export
- Format `{fmt}` (`{manifest['file']}`){f", quantisation `{manifest['quantize']}`" if
                                         manifest.get('quantize') else ''}
{f"- Tensor types in the file: {types}" if types else ""}
- Chat template: the one training used (in the file's metadata and the tokenizer files);
  stop tokens {', '.join(f'`{t}`' for t in manifest.get('stop_tokens', []))}
- Parity with the PyTorch model, greedy, on {parity['prompts']} {parity['dataset']} prompts:
  agreement {pct(parity['agreement'])}, exact match {pct(parity['exact_match_pytorch'])}
  (PyTorch) vs {pct(parity.get(f'exact_match_{fmt}'))} (export); step by step: {steps};
  **{'passed' if parity['passed'] else 'FAILED'}**
- Speed on the exporting machine ({throughput.get('note', 'greedy')}): {speed or 'n/a'}
- Size: model file {format_bytes(sizes['model_file'])}, bundle {format_bytes(sizes['bundle'])}
  (PyTorch float32 weights: {format_bytes(sizes['pytorch_weights'])})

## Use
{how}.

## Limits
- The figures come from one data source's held-out rows; other sources are untested.
- Sampling settings other than greedy (temperature 0) were not checked.
- No check for bias or fairness was run; keep a human in the loop for decisions about people.
"""
