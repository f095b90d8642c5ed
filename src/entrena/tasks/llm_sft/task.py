"""``task: llm-sft`` behind the :class:`~entrena.tasks.base.Task` protocol.

Inputs: ``input_ids`` (B, T), ``attention_mask`` (B, T) and ``target_mask`` (B, T), all
int64 (B batch, T tokens); ``labels`` (B, 1 + R) carries the example index and reference
ids for evaluation (:mod:`entrena.tasks.llm_sft.batches`). The model
(:class:`~entrena.tasks.llm_sft.model.SftModel`) returns per-example summed losses and
target counts, so :meth:`LlmSftTask.loss` is ``(sum of the batch's target-token NLL, its
target tokens)``: the loop divides by the target tokens of the whole optimizer step under
gradient accumulation (:meth:`SftBatches.target_count`). The baselines are the base model
zero-shot on the same prompts, generating as many new tokens as the tuned model, and, when
the responses are a small set of labels, the majority answer
(:mod:`entrena.tasks.llm_sft.baselines`); the verdict compares the model with the better of
them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrena.errors import ConfigError
from entrena.tasks.base import PlanningSpec, Task
from entrena.tasks.llm_sft.baselines import sft_baselines
from entrena.tasks.llm_sft.config import LlmSftConfig
from entrena.tasks.llm_sft.data import PreparedSft, prepare_sft
from entrena.tasks.llm_sft.evaluation import SFT_HIGHER_IS_BETTER, evaluate_sft
from entrena.tasks.llm_sft.sources import source_record, tokenizer_source, weights_source

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import ModelLocation, PredictOptions
    from entrena.tasks.llm_sft.batches import SftBatches
    from entrena.tasks.llm_sft.model import SftModel

__all__ = ["LlmSftTask"]

log = logging.getLogger("entrena")


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _warn_beyond_context(source: str, max_length: int) -> None:
    """Warn when ``model.max_length`` is longer than the context the model was trained for
    (``max_position_embeddings`` of a local folder's ``config.json``): positions past it
    were never seen in pretraining, and llama.cpp warns of a context overflow."""
    import json

    path = Path(source) / "config.json"
    if not path.is_file():
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    config = config.get("text_config") or config
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and max_length > limit:
        log.warning("model.max_length = %d is longer than the %d positions %s was trained for "
                    "(max_position_embeddings): longer examples reach positions the model "
                    "never saw; set model.max_length to at most %d", max_length, limit,
                    Path(source).name, limit)


class LlmSftTask:
    """Supervised fine-tuning of a causal LM on prompt → response chats (module docstring)."""

    name = "llm-sft"
    input_names: tuple[str, ...] = ("input_ids", "attention_mask", "target_mask")
    config_model: type[LlmSftConfig] = LlmSftConfig
    """The config class (the common sections plus this task's keys)."""
    model_files: tuple[str, ...] = ("entrena_model.json", "tokenizer_config.json")
    """Files every saved model folder holds (plus ``adapter/`` or ``model.safetensors``)."""
    export_formats: tuple[str, ...] = ("gguf", "hf")
    """GGUF for llama.cpp / Ollama, or the merged Hugging Face folder
    (:mod:`entrena.tasks.llm_sft.export`)."""
    mlflow_model = "chat"
    """An MLflow chat model (:class:`entrena.api.mlflow_models.EntrenaChatModel`: OpenAI's
    chat completion schema, the run's chat template and stop token)."""
    higher_is_better = SFT_HIGHER_IS_BETTER
    comparison_metric = "exact_match"
    """The metric the model and its best baseline (zero-shot, majority answer) are compared
    on."""

    def model_sources(self, loaded: LoadedConfig[LlmSftConfig]) -> dict[str, str]:
        """``{"tokenizer": …}`` and, for pretrained weights, ``"weights"``: folders, hub ids,
        ``alias:<name>``, ``ollama:<name>`` or ``gguf:<path>`` (a GGUF file is checked now
        and converted into the cache on first use, by :func:`tokenizer_source` and
        :func:`weights_source`).

        Raises:
            ConfigError: An unknown model, or ``finetuning: qlora`` without CUDA.
        """
        from entrena.tasks.llm_sft.sources import check_llm_source

        cfg = loaded.config
        model = cfg.model
        if model.finetuning == "qlora" and (cfg.train.accelerator not in ("auto", "cuda")
                                            or not _cuda_available()):
            raise ConfigError("model.finetuning = 'qlora' needs a CUDA GPU (bitsandbytes' 4-bit "
                              "base runs on CUDA only) and this run has none; use "
                              "model.finetuning: lora on this machine (entrena plan shows "
                              "QLoRA's needs on GPUs)")
        sources: dict[str, str] = {}
        if model.architecture is None:
            sources["weights"] = check_llm_source(model.name or "", loaded.base_dir)
            _warn_beyond_context(sources["weights"], model.max_length)
        if model.tokenizer is None and model.name is None:
            raise ConfigError("model.tokenizer: a model built from model.architecture needs a "
                              "tokenizer; set model.tokenizer: smollm2-135m")
        sources["tokenizer"] = (sources["weights"] if model.tokenizer is None and "weights"
                                in sources else check_llm_source(
                                    model.tokenizer or model.name or "", loaded.base_dir,
                                    "model.tokenizer" if model.tokenizer else "model.name",
                                    tokenizer_only=True))
        return sources

    def prepare(self, loaded: LoadedConfig[LlmSftConfig],
                sources: dict[str, str]) -> PreparedSft:
        """Rows read, turned into chats, checked, split and tokenized."""
        prepared = prepare_sft(loaded, {**sources,
                                        "tokenizer": tokenizer_source(loaded, sources)})
        cfg = loaded.config
        data = cfg.data
        prepared.model_meta = {
            "task": self.name, "labels": [], "finetuning": cfg.model.finetuning,
            "base_model": None, "max_length": prepared.max_length,
            "max_new_tokens": prepared.max_new_tokens, "format": prepared.data_format,
            "prompt_template": data.prompt_template if prepared.data_format == "template"
            else None,
            "response_column": data.response_column, "prompt_column": data.prompt_column,
            "completion_column": data.completion_column,
            "messages_column": data.messages_column, "system_prompt": data.system_prompt,
            "base_source": None if cfg.model.architecture is not None
            else source_record(cfg.model.name, loaded.base_dir)}
        source = prepared.model_meta["base_source"]
        if source and source["kind"] != "alias":
            log.info("base model: %s (%s)", source.get("name") or source.get("path"),
                     source["digest"])
        return prepared

    def build_model(self, loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str],
                    prepared: PreparedSft) -> SftModel:
        """An :class:`~entrena.tasks.llm_sft.model.SftModel` (LoRA or full fine-tuning)."""
        from entrena.tasks.llm_sft.model import build_sft_model

        model = loaded.config.model
        weights = weights_source(loaded, sources)
        prepared.model_meta["base_model"] = weights  # what a saved adapter is applied to
        return build_sft_model(
            pretrained=weights,
            architecture=model.architecture.model_dump() if model.architecture else None,
            tokenizer=prepared.tokenizer, finetuning=model.finetuning,
            lora=model.lora.model_dump(), dropout=model.dropout,
            max_new_tokens=prepared.max_new_tokens,
            gradient_checkpointing=model.gradient_checkpointing,
            shared_prefix=model.shared_prefix)

    def batches(self, loaded: LoadedConfig[LlmSftConfig], prepared: PreparedSft, role: str, *,
                batch_size: int, shuffle: bool) -> SftBatches:
        """:class:`~entrena.tasks.llm_sft.batches.SftBatches` of split ``role``."""
        from entrena.tasks.llm_sft.batches import SftBatches
        from entrena.tasks.llm_sft.tokenizer import padding_id

        tcfg = loaded.config.train
        split = getattr(prepared.splits, role)
        source = SftBatches(split, batch_size=batch_size, pad_id=padding_id(prepared.tokenizer),
                            reference_width=_reference_width(prepared), shuffle=shuffle,
                            group_by_length=tcfg.group_by_length, seed=tcfg.seed,
                            pad_to_multiple_of=loaded.config.data.pad_to_multiple_of)
        if shuffle:
            source.pack = packing_decision(loaded.config.data.packing, split.lengths,
                                           source.plan(0))
        return source

    @staticmethod
    def loss(outputs: Any, batch: dict[str, Any]) -> tuple[Any, int]:
        """``(NLL summed over the batch's target tokens, their count)``."""
        count = outputs[:, 1].sum()
        return outputs[:, 0].sum(), 1 if count.is_meta else int(count.item())

    def evaluate(self, outputs: Any, targets: Any, prepared: PreparedSft, *,
                 detailed: bool = False) -> dict[str, Any]:
        """Loss, perplexity, exact match, EOS share (and, ``detailed``: samples of the test
        split)."""
        tokenizer = prepared.tokenizer
        prompts = prepared.splits.test.prompts if detailed and prepared.splits.test else None
        return evaluate_sft(outputs, targets, tokenizer, int(tokenizer.eos_token_id), prompts)

    @staticmethod
    def comparison_rows(outputs: Any, targets: Any,
                        prepared: PreparedSft) -> tuple[Any, Any]:
        """Each example's exact-match flag
        (:func:`~entrena.tasks.llm_sft.evaluation.match_rows`)."""
        from entrena.tasks.llm_sft.evaluation import match_rows

        tokenizer = prepared.tokenizer
        return match_rows(outputs, targets, tokenizer, int(tokenizer.eos_token_id))

    def baselines(self, loaded: LoadedConfig[LlmSftConfig],
                  prepared: PreparedSft) -> dict[str, dict[str, Any]]:
        """The base model zero-shot and, when the training responses are labels, the
        majority answer (:func:`~entrena.tasks.llm_sft.baselines.sft_baselines`)."""
        return sft_baselines(loaded, prepared, self.model_sources(loaded))

    @staticmethod
    def forward_share(model: Any) -> float:
        """An evaluation pass's time per example as a share of a training step's: the
        forward over all L decoder layers against forward plus a backward through the
        trained ones (LoRA: activation gradients over the adapted layers, ~1 forward each;
        full: activations and weights, ~2). 1/2 for LoRA on every layer, 2/3 on half of them,
        1/3 for full fine-tuning (Kaplan et al., 2020: backward ≈ 2 forwards). The greedy
        decoding of an evaluation comes on top (measured 1.13x for the demo's 2 new tokens:
        docs/benchmarks.md, bench:lora-layers), and the fit times its own first evaluation.
        """
        lm = getattr(model, "lm", model)
        config = getattr(lm, "config", None)
        text = (config.get_text_config() if config is not None
                and hasattr(config, "get_text_config") else config)
        depth = int(getattr(text, "num_hidden_layers", 0) or 0)
        layers = {name.split(".layers.", 1)[1].split(".", 1)[0]
                  for name, p in lm.named_parameters() if p.requires_grad and ".layers." in name}
        if not depth or not layers:
            return 1.0 / 3.0
        if all(p.requires_grad for p in lm.parameters()):
            return 1.0 / 3.0  # full fine-tuning: weight gradients too
        return 1.0 / (1.0 + len(layers) / depth)

    def save_model(self, model: Any, prepared: PreparedSft, directory: Path) -> None:
        """The adapter (or the whole model), the tokenizer with its chat template, and
        ``entrena_model.json``."""
        from entrena.tasks.llm_sft.model import save_sft_model

        save_sft_model(model, prepared.tokenizer, directory, prepared.model_meta)

    def load_model(self, directory: Path) -> tuple[SftModel, dict[str, Any]]:
        """``(model in eval mode, meta)``; ``meta["tokenizer"]`` holds the tokenizer."""
        from entrena.tasks.llm_sft.model import load_sft_model

        model, tokenizer, meta = load_sft_model(directory)
        return model, {**meta, "tokenizer": tokenizer}

    def example_inputs(self, model: Any, meta: dict[str, Any],
                       batch_size: int) -> dict[str, Any]:
        """Token ids 1..8 with the last two as targets, (``batch_size``, 8)."""
        import torch

        ids = torch.arange(1, 9, dtype=torch.int64).repeat(batch_size, 1)
        target = torch.zeros_like(ids)
        target[:, -2:] = 1
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target_mask": target}

    def planning(self, loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str],
                 prepared: PreparedSft) -> PlanningSpec:
        """Token lengths per split; the model's profile from the LLM formulas
        (:func:`~entrena.planning.llm_profile.llm_profile`, the shape read from the
        weights' ``config.json`` or ``model.architecture``); probed on the median-length and
        the longest batch of epoch 0; evaluation memory at the longest evaluation batch.
        The plan document gets ``llm``: :func:`~entrena.planning.llm.llm_memory`'s terms at
        the run's settings and the ``entrena plan --llm`` command that gives the same."""
        from entrena.tasks.llm_sft.planning import sft_planning

        return sft_planning(self, loaded, sources, prepared)

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """The merged model as GGUF or a Hugging Face folder, with its parity check
        (:func:`entrena.tasks.llm_sft.export.write_llm_bundle`)."""
        from entrena.tasks.llm_sft.export import write_llm_bundle

        return write_llm_bundle(run, request)

    @property
    def chat_session(self) -> Any:
        """The class ``entrena chat`` talks through
        (:class:`~entrena.tasks.llm_sft.session.ChatSession`)."""
        from entrena.tasks.llm_sft.session import ChatSession

        return ChatSession

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Generate a response for each row of ``data`` into ``output``
        (:func:`entrena.tasks.llm_sft.predict.predict_chats`)."""
        from entrena.tasks.llm_sft.predict import predict_chats

        return predict_chats(location, data, output, options)


PACKING_MIN_SAVING = 0.05
"""``data.packing: auto`` packs when packing saves at least this share of the epoch's token
slots. A packed batch costs about what a padded batch of the same shape does (both pass a
mask to attention; docs/benchmarks.md, "Packing", measured the difference on SmolLM2-135M),
so any saving pays; 5% keeps plain batches where the gain is within step-time noise."""


def packing_decision(setting: str | bool, lengths: Any, plan: list[list[int]]) -> bool:
    """Whether training batches are packed: ``data.packing`` as given, or for ``auto``
    whether packing the first epoch's batches saves at least :data:`PACKING_MIN_SAVING`
    of their token slots (logged with the figures).

    Args:
        setting: ``data.packing`` (``"auto"``, ``True`` or ``False``).
        lengths: Tokens per training example, (N,).
        plan: The first epoch's batches (example indices).
    """
    from entrena.data.batching import packed_padding_fraction, padding_fraction

    if setting != "auto":
        return bool(setting)
    padded = padding_fraction(lengths, plan)
    packed = packed_padding_fraction(lengths, plan)
    saving = 1.0 - (1.0 - padded) / (1.0 - packed)  # slots saved / slots when padded
    chosen = saving >= PACKING_MIN_SAVING
    log.info("data.packing auto: %s (padding %.1f%% of the token slots padded, %.1f%% "
             "packed: %.1f%% fewer slots; packs from %.0f%%)", "packing" if chosen else
             "not packing", 100 * padded, 100 * packed, 100 * saving, 100 * PACKING_MIN_SAVING)
    return chosen


def _reference_width(prepared: PreparedSft) -> int:
    return max(int(split.response_lengths.max()) for _, split in prepared.splits.roles())


if TYPE_CHECKING:  # mypy checks the class against the protocol, with its own types
    _CHECKED: Task[LlmSftConfig, PreparedSft] = LlmSftTask()
