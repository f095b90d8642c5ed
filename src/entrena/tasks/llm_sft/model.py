"""The model of ``task: llm-sft``: a causal language model (with LoRA adapters, or all its
weights trained) behind one ``forward`` that returns per-example losses.

:class:`SftModel` computes the loss inside ``forward``: the decoder's hidden states at the
positions that predict a target token (the response and its EOS) go through the output
head, and only those. Logits of the prompt and padding positions, (B, T, V) floats that
dominate a small model's memory (V = 49,152 for SmolLM2), are never made. In eval mode it
also generates greedily from each prompt (left-padded), so validation reports exact match
and the share of generations ending with EOS through the same protocol call.

The saved model folder: the tokenizer (with the chat template every later step uses),
``entrena_model.json``, and the adapter (``adapter/``, PEFT format, with the base model's
folder recorded) or the whole model (``config.json`` + ``model.safetensors``). A base built
from ``model.architecture`` (random weights) is saved beside the adapter (``base/``).
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from entrena.core.console import quiet_transformers
from entrena.errors import ConfigError
from entrena.tasks.llm_sft.tokenizer import build_tokenizer, padding_id, save_tokenizer

if TYPE_CHECKING:
    from transformers.cache_utils import DynamicCache

__all__ = ["SftModel", "build_language_model", "build_sft_model", "greedy_generate",
           "save_sft_model", "load_sft_model", "META_FILE", "ADAPTER_DIR", "BASE_DIR",
           "shared_prefix_length"]

log = logging.getLogger("entrena")

META_FILE = "entrena_model.json"
ADAPTER_DIR = "adapter"
BASE_DIR = "base"
IGNORE = -1
"""The id written after a generation's end (EOS or the token budget)."""


def build_language_model(*, pretrained: str | None, architecture: dict[str, Any] | None,
                         tokenizer: Any, dropout: float = 0.0, quantize_4bit: bool = False
                         ) -> Any:
    """A causal language model in float32: loaded, or a Llama of ``architecture`` with
    random weights (vocabulary and special ids from ``tokenizer``).

    Raises:
        ValueError: Neither ``pretrained`` nor ``architecture`` is given.
    """
    from transformers import AutoModelForCausalLM, LlamaConfig

    quiet_transformers()
    if architecture is not None:
        config = LlamaConfig(vocab_size=len(tokenizer), pad_token_id=padding_id(tokenizer),
                             eos_token_id=tokenizer.eos_token_id,
                             bos_token_id=tokenizer.bos_token_id,
                             attention_dropout=dropout, tie_word_embeddings=True,
                             **architecture)
        return AutoModelForCausalLM.from_config(config)
    if pretrained is None:
        raise ValueError("build_language_model: give pretrained (a folder or hub id) or "
                         "architecture")
    kwargs: dict[str, Any] = {"dtype": torch.float32}
    if quantize_4bit:
        from transformers import BitsAndBytesConfig

        kwargs = {"quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16), "device_map": {"": 0}}
    model = AutoModelForCausalLM.from_pretrained(pretrained, **kwargs)
    if dropout and hasattr(model.config, "attention_dropout"):
        model.config.attention_dropout = dropout
    return model


def _decoder_path(lm: Any) -> str:
    """The module path of the text decoder (``model``; ``model.language_model`` inside a
    multimodal model such as Gemma 3 4B+), whose layers LoRA adapts."""
    decoder = lm.get_decoder()
    return next((name for name, module in lm.named_modules() if module is decoder), "")


def _linear_layers(lm: Any) -> list[str]:
    """Full names of the ``nn.Linear`` modules inside any ``layers`` list of ``lm`` (the text
    decoder's, and a vision tower's in a multimodal model)."""
    return [name for name, module in lm.named_modules()
            if isinstance(module, nn.Linear) and ".layers." in name]


def projection_names(lm: Any) -> list[str]:
    """The names of the text decoder layers' linear projections (``q_proj`` …
    ``down_proj``; Phi-3's ``qkv_proj``, ``gate_up_proj``): what ``all-linear`` stands for,
    without the output head and without a vision tower's layers."""
    prefix = _decoder_path(lm) + "."
    return sorted({name.rsplit(".", 1)[-1] for name in _linear_layers(lm)
                   if name.startswith(prefix)})


def lora_config(settings: dict[str, Any], lm: Any = None) -> Any:
    """PEFT's ``LoraConfig`` of ``model.lora`` (causal LM, no bias adapters).

    With ``layers`` (the last N decoder layers only) ``lm`` is needed: its depth, and the
    names ``all-linear`` stands for (PEFT takes a layer subset with a list of names only).
    In a multimodal model (a vision tower beside the text decoder: Gemma 3 4B+) the targets
    become a pattern over the text decoder's layers, so that the vision tower gets no
    adapters (PEFT's ``all-linear`` would adapt it too).

    Raises:
        ConfigError: ``layers`` exceeds the model's decoder layers.
    """
    from peft import LoraConfig

    targets = settings["target_modules"]
    top = settings.get("layers")
    layers_to_transform: list[int] | None = None
    layers_pattern: str | None = None
    if lm is not None and (top is not None or _has_other_layers(lm)):
        depth = int(lm.config.get_text_config().num_hidden_layers)
        if top is not None and top > depth:
            raise ConfigError(f"model.lora.layers: {top} layers, but the model has {depth} "
                              f"decoder layers; set model.lora.layers to at most {depth} "
                              f"(or null for all)")
        if targets == "all-linear":
            targets = projection_names(lm)
        if _has_other_layers(lm):
            indices = range(depth - (top or depth), depth)
            targets = (rf"{re.escape(_decoder_path(lm))}\.layers\."
                       rf"({'|'.join(map(str, indices))})\.(.*\.)?"
                       rf"({'|'.join(map(re.escape, targets))})")
        elif top is not None:
            layers_to_transform, layers_pattern = list(range(depth - top, depth)), "layers"
    return LoraConfig(r=int(settings["r"]),
                      # peft annotates an int; a float alpha scales the same (alpha / r)
                      lora_alpha=float(settings["alpha"]),  # type: ignore[arg-type]
                      lora_dropout=float(settings["dropout"]), target_modules=targets,
                      bias="none", task_type="CAUSAL_LM",
                      layers_to_transform=layers_to_transform, layers_pattern=layers_pattern)


def _has_other_layers(lm: Any) -> bool:
    """Whether ``lm`` has linear layers in a ``layers`` list outside its text decoder (a
    vision tower)."""
    prefix = _decoder_path(lm) + "."
    return any(not name.startswith(prefix) for name in _linear_layers(lm))


class SftModel(nn.Module):
    """A causal LM whose ``forward`` returns per-example summed losses (and, in eval mode,
    greedy generations).

    Args:
        lm: A Hugging Face causal LM, or a PEFT model around one.
        eos_token_id: The token that ends a response.
        pad_token_id: The id in padding slots (any id: padding is masked).
        max_new_tokens: Tokens generated per prompt in eval mode (G).
        adapters_only: ``state_dict`` holds the trained parameters only (LoRA: the base is
            frozen, so checkpoints and best-weight copies hold megabytes, not the model).
        share_prefix: Decode the prompt prefix that every example of a batch shares (a chat
            template's system turn, a template's opening words) once, and the rest of each
            example after it (:func:`shared_prefix_length`), in training and evaluation.
    """

    def __init__(self, lm: Any, *, eos_token_id: int, pad_token_id: int, max_new_tokens: int,
                 adapters_only: bool, share_prefix: bool = True):
        super().__init__()
        self.share_prefix = share_prefix
        self.lm = lm
        self.eos_token_id = int(eos_token_id)
        self.pad_token_id = int(pad_token_id)
        self.max_new_tokens = int(max_new_tokens)
        self.adapters_only = adapters_only

    @property
    def causal_lm(self) -> Any:
        """The Hugging Face causal LM (adapters injected in place under PEFT)."""
        get = getattr(self.lm, "get_base_model", None)
        return get() if get is not None else self.lm

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                target_mask: torch.Tensor, position_ids: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Per-example (or, packed, per-row) losses, and greedy generations in eval mode.

        Args:
            input_ids: Prompt + response + EOS, right-padded, (B, T) int64.
            attention_mask: 1 on real tokens, (B, T) int64.
            target_mask: 1 on the tokens to learn (response and EOS), (B, T) int64.
            position_ids: Packed rows only (train mode): each example's positions from 0,
                (B, T) int64. The padding mask is then left out, so that transformers builds
                the block-diagonal causal mask from the restarting positions (its
                ``find_packed_sequence_indices``): every example attends to itself only.

        Returns:
            (B, 2) float32 in train mode: the summed negative log-likelihood (nats) of each
            row's target tokens and their count (a row is one example unless packed);
            (B, 2 + G) in eval mode, the generated ids after them (EOS included,
            :data:`IGNORE` after the end).

        Raises:
            ValueError: Packed rows (``position_ids``) in eval mode.
        """
        lm = self.causal_lm
        if position_ids is not None and not self.training:
            raise ValueError("packed rows (position_ids) are for training only: evaluation "
                             "generates per example")
        # On the meta device (the planner's shape-only pass) the padding mask is left out:
        # building it reads values, and a causal mask has the same cost.
        mask = None if input_ids.is_meta or position_ids is not None else attention_mask
        prefix = (shared_prefix_length(input_ids, target_mask)
                  if self.share_prefix and position_ids is None
                  and not input_ids.is_meta and not _checkpointing(lm) else 0)
        if prefix:
            hidden = _decode_with_shared_prefix(lm, input_ids, attention_mask, prefix)
        else:
            hidden = lm.get_decoder()(input_ids=input_ids, attention_mask=mask,
                                      position_ids=position_ids,
                                      use_cache=False).last_hidden_state  # (B, T, H)
        targets = target_mask[:, 1:].bool()  # token t is predicted at position t - 1
        if targets.is_meta:  # the planner's shape-only pass: every position (an upper bound)
            rows, cols = (torch.arange(n, device="meta") for n in targets.shape)
            rows, cols = rows.repeat_interleave(targets.shape[1]), cols.repeat(targets.shape[0])
        else:
            rows, cols = targets.nonzero(as_tuple=True)
        logits = lm.get_output_embeddings()(hidden[rows, cols])  # (K, V), K target tokens
        cap = _final_softcap(lm)
        if cap:  # Gemma 2: the head's logits go through cap·tanh(x / cap), as its forward does
            logits = torch.tanh(logits / cap) * cap
        nll = nn.functional.cross_entropy(logits.float(), input_ids[rows, cols + 1],
                                          reduction="none")  # (K,)
        sums = torch.zeros(input_ids.shape[0], dtype=torch.float32, device=nll.device)
        sums = sums.index_add(0, rows, nll)
        counts = targets.sum(1).to(torch.float32)
        out = torch.stack([sums, counts], dim=1)  # (B, 2)
        if self.training:
            return out
        generated = self._generate(input_ids, target_mask, rows, cols, logits)
        return torch.cat([out, generated.to(out.device, torch.float32)], dim=1)

    def _generate(self, input_ids: torch.Tensor, target_mask: torch.Tensor,
                  rows: torch.Tensor, cols: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Greedy generations (B, G), reusing the teacher-forced pass.

        Greedy decoding picks the argmax at each step; while the argmax at every target
        position equals the reference token, the greedy continuation *is* the reference (the
        model saw exactly the tokens it would have generated). Those rows need no decoding;
        the others are decoded from their prompts. A tuned model matches most rows, so
        evaluation costs about one forward pass over the examples instead of two.
        """
        batch, budget = input_ids.shape[0], self.max_new_tokens
        order = (torch.cumsum(target_mask[:, 1:], 1) - 1)[rows, cols]  # (K,) index in response
        within = order < budget
        wrong = (logits.argmax(-1) != input_ids[rows, cols + 1]) & within
        redo = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
        redo[rows[wrong]] = True
        generated = torch.full((batch, budget), IGNORE, dtype=torch.long,
                               device=input_ids.device)
        generated[rows[within], order[within]] = input_ids[rows[within], cols[within] + 1]
        again = redo.nonzero(as_tuple=True)[0].tolist()
        if again:
            prompt_lengths = target_mask.argmax(1)  # first target token = end of the prompt
            generated[again] = greedy_generate(
                self.lm, [input_ids[i, :int(prompt_lengths[i])] for i in again],
                max_new_tokens=budget, eos_token_id=self.eos_token_id,
                pad_token_id=self.pad_token_id, share_prefix=self.share_prefix)
        return generated

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The trained parameters only under LoRA (see the class docstring); else all."""
        full = super().state_dict(*args, **kwargs)
        if not self.adapters_only:
            return full
        prefix = kwargs.get("prefix", "")
        keep = {prefix + name for name, p in self.named_parameters() if p.requires_grad}
        return OrderedDict((k, v) for k, v in full.items() if k in keep)

    def load_state_dict(self, state_dict: Any, strict: bool = True,
                        assign: bool = False) -> Any:
        """Load what :meth:`state_dict` wrote; under LoRA every trained parameter must be
        there (``RuntimeError`` otherwise, with ``strict``)."""
        if not self.adapters_only:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        result = super().load_state_dict(state_dict, strict=False, assign=assign)
        trained = {name for name, p in self.named_parameters() if p.requires_grad}
        missing = sorted(trained - set(state_dict))
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(f"adapter weights do not match: missing {missing[:5]}, "
                               f"unexpected {list(result.unexpected_keys)[:5]}")
        return result


def _final_softcap(lm: Any) -> float | None:
    """The output logits' soft-cap of a model that has one (Gemma 2's
    ``final_logit_softcapping``, 30), else ``None``: its own forward caps the logits, so the
    loss computed here from the head must too."""
    config = lm.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(text, "final_logit_softcapping", None)
    return float(cap) if cap else None


def _checkpointing(lm: Any) -> bool:
    """Whether activation checkpointing is on (transformers 5's name, then 4's)."""
    flag = getattr(lm, "is_activation_checkpointing", None)
    return bool(getattr(lm, "is_gradient_checkpointing", False) if flag is None else flag)


MIN_SHARED_PREFIX = 4
"""Shortest common prefix (tokens) decoded once per batch; shorter ones are not worth the
extra decoder call."""


def shared_prefix_length(input_ids: torch.Tensor, target_mask: torch.Tensor) -> int:
    """Tokens at the start that every row of a batch shares, within every row's prompt.

    Args:
        input_ids: (B, T) int64, right-padded.
        target_mask: (B, T), 1 on the response tokens.

    Returns:
        The length P of the common prefix, at most the shortest prompt (so that no target
        token is in it), or 0 when there is one row or P < :data:`MIN_SHARED_PREFIX`.
    """
    if input_ids.shape[0] < 2:
        return 0
    shortest_prompt = int(target_mask.argmax(1).min())
    same = (input_ids[:, :shortest_prompt] == input_ids[:1, :shortest_prompt]).all(0)
    length = int(same.long().cumprod(0).sum())
    return length if length >= MIN_SHARED_PREFIX else 0


def _decode_with_shared_prefix(lm: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                               prefix: int) -> torch.Tensor:
    """The decoder's last hidden states (B, T, H), the shared prefix decoded once.

    The prefix's keys and values (one row) are broadcast to the batch as a cache, and the
    rest of every row is decoded after them at positions P.., so each example's states are
    those of decoding it alone (causal attention: the prefix never sees what follows it);
    the gradients through the broadcast cache add up over the rows, as the rows' own
    gradients through their copies of the prefix would. LoRA dropout on the prefix then
    draws one mask for the batch instead of one per example.
    """
    from transformers.cache_utils import DynamicCache

    decoder = lm.get_decoder()
    batch = input_ids.shape[0]
    cache = DynamicCache(config=decoder.config)
    head = decoder(input_ids=input_ids[:1, :prefix], cache=cache,
                   use_cache=True).last_hidden_state  # (1, P, H)
    _broadcast_cache(cache, batch)
    positions = torch.arange(prefix, input_ids.shape[1], device=input_ids.device)
    rest = decoder(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, cache=cache,
                   position_ids=positions.unsqueeze(0).expand(batch, -1),
                   use_cache=True).last_hidden_state  # (B, T - P, H)
    return torch.cat([head.expand(batch, -1, -1), rest], dim=1)


def _broadcast_cache(cache: DynamicCache, rows: int) -> None:
    """Expand every layer's keys and values, computed for one row, to ``rows`` rows (views,
    no copies).

    Raises:
        ConfigError: A cache layer without keys and values (a linear-attention layer).
    """
    from transformers.cache_utils import CacheLayerMixin

    for layer in cache.layers:
        if not isinstance(layer, CacheLayerMixin) or layer.keys is None or layer.values is None:
            raise ConfigError(f"model.shared_prefix: a {type(layer).__name__} cache layer holds "
                              f"no keys and values to share between the rows; set "
                              f"model.shared_prefix: false for this model")
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)


def _common_prefix(prompts: list[torch.Tensor]) -> int:
    """Tokens every prompt starts with (0 below :data:`MIN_SHARED_PREFIX` or for one prompt),
    leaving each prompt at least one token after it."""
    if len(prompts) < 2:
        return 0
    width = min(len(p) for p in prompts) - 1
    first = prompts[0][:width]
    same = torch.stack([p[:width] == first for p in prompts[1:]]).all(0)
    length = int(same.long().cumprod(0).sum())
    return length if length >= MIN_SHARED_PREFIX else 0


@torch.no_grad()
def greedy_generate(lm: Any, prompts: list[torch.Tensor], *, max_new_tokens: int,
                    eos_token_id: int, pad_token_id: int, share_prefix: bool = True
                    ) -> torch.Tensor:
    """Greedy continuations of prompts of different lengths (left-padded into one batch).

    The tokens all prompts start with (a chat template's system turn) are decoded once and
    their keys and values shared by the rows (``share_prefix``): the same generations as
    decoding each prompt whole, 0.85× the time for the demo's 26-token prefix of
    ~115-token prompts (`bench:llm-demo-costs`).

    Args:
        lm: A causal LM (or PEFT model) with ``generate``.
        prompts: B prompts of token ids, each (P_i,) int64.
        max_new_tokens: G, the most tokens generated per prompt.
        eos_token_id: Generation of a row stops after this token.
        pad_token_id: Filler of the left padding.
        share_prefix: Decode the prompts' common prefix once.

    Returns:
        (B, G) int64: the generated ids, EOS included, :data:`IGNORE` after the end.
    """
    device = prompts[0].device
    prefix = _common_prefix(prompts) if share_prefix else 0
    rests = [p[prefix:] for p in prompts]
    longest = max(len(r) for r in rests)
    ids = torch.full((len(prompts), prefix + longest), pad_token_id, dtype=torch.long,
                     device=device)
    mask = torch.zeros_like(ids)
    ids[:, :prefix], mask[:, :prefix] = prompts[0][:prefix], 1
    for row, rest in enumerate(rests):  # left padding between the prefix and the rest
        ids[row, prefix + longest - len(rest):] = rest
        mask[row, prefix + longest - len(rest):] = 1
    extra: dict[str, Any] = {}
    if prefix:
        # The prefix's keys and values, computed once and broadcast to the rows; generate
        # decodes the rest, at positions counted from the attention mask (P + i).
        from transformers.cache_utils import DynamicCache

        causal = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
        cache = DynamicCache(config=causal.config)
        lm(input_ids=ids[:1, :prefix], cache=cache, use_cache=True, logits_to_keep=1)
        _broadcast_cache(cache, len(prompts))
        extra["cache"] = cache
    output = lm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                         do_sample=False, num_beams=1, eos_token_id=eos_token_id,
                         pad_token_id=pad_token_id, temperature=None, top_p=None, top_k=None,
                         **extra)
    new = output[:, prefix + longest:]
    result = torch.full((len(prompts), max_new_tokens), IGNORE, dtype=torch.long, device=device)
    for row in range(len(prompts)):
        tokens = new[row].tolist()
        if eos_token_id in tokens:
            tokens = tokens[:tokens.index(eos_token_id) + 1]
        result[row, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return result


def build_sft_model(*, pretrained: str | None, architecture: dict[str, Any] | None,
                    tokenizer: Any, finetuning: str, lora: dict[str, Any], dropout: float,
                    max_new_tokens: int, gradient_checkpointing: bool,
                    shared_prefix: bool = True) -> SftModel:
    """The model to train: base + LoRA adapters (base frozen), or the whole base trainable.

    Args:
        pretrained: Model folder or hub id (ignored with ``architecture``).
        architecture: A Llama shape for random weights (tests).
        tokenizer: The tokenizer (vocabulary size and special ids).
        finetuning: ``lora``, ``qlora`` or ``full``.
        lora: ``model.lora`` as a dict (``r``, ``alpha``, ``dropout``, ``target_modules``).
        dropout: Attention dropout of the base.
        max_new_tokens: G of evaluation generations.
        gradient_checkpointing: Recompute activations in backward.
        shared_prefix: Decode a batch's common prompt prefix once (:class:`SftModel`).
    """
    lm = build_language_model(pretrained=pretrained, architecture=architecture,
                              tokenizer=tokenizer, dropout=dropout,
                              quantize_4bit=finetuning == "qlora")
    if gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.config.use_cache = True
    if finetuning in ("lora", "qlora"):
        from peft import get_peft_model

        if finetuning == "qlora":
            from peft import prepare_model_for_kbit_training

            lm = prepare_model_for_kbit_training(
                lm, use_gradient_checkpointing=gradient_checkpointing)
        config = lora_config(lora, lm)
        names = projection_names(lm)
        targets = lora["target_modules"]
        missing = [] if targets == "all-linear" else [t for t in targets if t not in names]
        if targets != "all-linear" and (not targets or missing):
            raise ConfigError(f"model.lora.target_modules: {missing or targets!r} "
                              f"{'name no layer' if missing else 'is empty'} of the model; "
                              f"use all-linear or names among {', '.join(names)}")
        lm = get_peft_model(lm, config)
    model = SftModel(lm, eos_token_id=tokenizer.eos_token_id, pad_token_id=padding_id(tokenizer),
                     max_new_tokens=max_new_tokens, adapters_only=finetuning != "full",
                     share_prefix=shared_prefix)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log.info("%s: %s of %s parameters trained (%.2f%%)", finetuning, f"{trained:,}",
             f"{total:,}", 100 * trained / max(1, total))
    return model.train()


FINGERPRINT_BYTES = 1 << 20
"""Bytes read from each end of a weight file for :func:`folder_fingerprint`."""


def folder_fingerprint(folder: Path) -> str:
    """A SHA-256 over a model folder's ``config.json`` and, per weight file, its name, size
    and first and last :data:`FINGERPRINT_BYTES` (a safetensors header alone is equal for
    two models of one shape; the tensor bytes at both ends are not). Reads ~2 MiB per weight
    file, so a saved adapter checks its base in milliseconds, where hashing a 16 GB base would
    take a minute; a change confined to the middle of a file goes unseen."""
    import hashlib

    from entrena.tasks.llm_sft.sources import WEIGHT_FILES

    digest = hashlib.sha256()
    config = folder / "config.json"
    digest.update(config.read_bytes() if config.is_file() else b"")
    files = sorted({p for pattern in WEIGHT_FILES for p in folder.glob(pattern)})
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        with path.open("rb") as handle:
            digest.update(handle.read(FINGERPRINT_BYTES))
            handle.seek(max(0, size - FINGERPRINT_BYTES))
            digest.update(handle.read(FINGERPRINT_BYTES))
    return f"sha256:{digest.hexdigest()}"


def save_sft_model(model: SftModel, tokenizer: Any, directory: Path,
                   meta: dict[str, Any]) -> None:
    """Write the model folder (see the module docstring). Overwrites ``directory``.

    Args:
        meta: ``entrena_model.json``'s content (``task``, ``finetuning``, ``base_model`` …);
            ``base_model`` is replaced by ``base/`` when the base has random weights.
    """
    directory.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    if meta["finetuning"] == "full":
        model.causal_lm.save_pretrained(directory, safe_serialization=True)
    else:
        model.lm.save_pretrained(directory / ADAPTER_DIR, safe_serialization=True)
        if meta.get("base_model") is None:  # random weights: keep them
            model.lm.get_base_model().save_pretrained(directory / BASE_DIR,
                                                      safe_serialization=True)
            # save_pretrained of the base under PEFT writes the adapted layers' names;
            # the adapter is applied again on load, so the plain base is what is needed.
            meta["base_model"] = BASE_DIR
        elif Path(str(meta["base_model"])).is_dir():
            meta["base_fingerprint"] = folder_fingerprint(Path(str(meta["base_model"])))
    save_tokenizer(tokenizer, directory)
    (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load_sft_model(directory: str | Path) -> tuple[SftModel, Any, dict[str, Any]]:
    """``(model in eval mode, tokenizer, meta)`` from a saved model folder.

    Raises:
        DataError: The base model folder an adapter was trained on is gone, or changed
            since (:func:`folder_fingerprint`).
    """
    from transformers import AutoModelForCausalLM

    from entrena.errors import DataError

    quiet_transformers()
    directory = Path(directory)
    meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    tokenizer = build_tokenizer(str(directory))
    lm: nn.Module
    if meta["finetuning"] == "full":
        lm = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    else:
        from peft import PeftModel

        base_dir = Path(meta["base_model"])
        base_dir = base_dir if base_dir.is_absolute() else directory / base_dir
        if not (base_dir / "config.json").is_file():
            raise DataError(f"{directory}: the adapter's base model {base_dir} is missing; "
                            f"copy it back (a base entrena converted from a GGUF file or an "
                            f"Ollama model: entrena train with the same model.name converts it "
                            f"again)")
        if meta.get("base_fingerprint") and \
                folder_fingerprint(base_dir) != meta["base_fingerprint"]:
            raise DataError(f"{directory}: the adapter's base model {base_dir} is not the one "
                            f"it was trained on (its config.json or weights changed since); "
                            f"put the original base back there, or train again from this one")
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        lm = PeftModel.from_pretrained(base, directory / ADAPTER_DIR)
    model = SftModel(lm, eos_token_id=tokenizer.eos_token_id, pad_token_id=padding_id(tokenizer),
                     max_new_tokens=int(meta["max_new_tokens"]),
                     adapters_only=meta["finetuning"] != "full")
    return model.eval(), tokenizer, meta
