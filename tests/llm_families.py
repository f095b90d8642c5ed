"""Tiny random-weight decoders of the families llama.cpp converts, as local Hugging Face
folders, for the tests of ``task: llm-sft`` and of the GGUF export per family.

``family_folder(family, directory, tokenizer_dir)`` writes ``config.json``,
``model.safetensors`` and a tokenizer with the family's own chat template and special tokens:
SmolLM2's byte-level BPE vocabulary (``tokenizer_dir``, the only real tokenizer offline) with
the family's turn markers added as special tokens, or, for Gemma 2 and Phi-3, whose
llama.cpp converter classes read a sentencepiece ``tokenizer.model``, a small sentencepiece
BPE model trained here on the tests' chat text (needs the ``sentencepiece`` package; the
folder holds ``tokenizer.model`` too, and ``tokenizer_config.json`` lists the special tokens
under ``added_tokens_decoder`` as the published folders do). Phi-3's is laid out as
published: ``<s>``/``</s>`` pieces, a leading-space (legacy) pre-tokenizer, no BOS added, and
turn markers that eat the whitespace after them (llama.cpp does the same for a model whose
``general.name`` holds "phi3" or "phi-3", so a converted folder tokenizes prompts alike only
under such a name). Every model is 64 wide, 2 layers, 4 heads, 2 key/value heads
(grouped-query attention), seeded: the same folder every time. With the converter of
llama-cpp-python 0.3.36's vendored tree, every family but ``qwen2`` converts to GGUF and
tokenizes and answers 4 prompts as transformers does; ``qwen2``'s tokenizer loads as
``Qwen2Tokenizer`` (its own pre-tokenizer over SmolLM2's vocabulary), whose hash the converter
does not know.

The chat templates are the families' published ones, cut to what the tests render (no tool
calls): Llama 3 (``<|eot_id|>``), ChatML (Qwen 2.5, Qwen 3, SmolLM2: ``<|im_end|>``), Mistral
``[INST]`` (``</s>``), Gemma (``<end_of_turn>``) and Phi-3 (``<|end|>``). Where the family's
tokenizer names another EOS than the token that ends an assistant turn (Llama 3 base's
``<|end_of_text|>``, Gemma's ``<eos>``, Phi-3's ``<|endoftext|>``), the folder keeps it, so
that the stop token must be read from the template (``Family.stop``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Family", "FAMILIES", "family_folder", "sentencepiece_available"]

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")
"""Meta-Llama-3-8B-Instruct's template."""

QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- endif %}")
"""Qwen2.5-Instruct's template without its tool branch (ChatML, a default system turn)."""

QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}")
"""Qwen3's template without tools and reasoning history (ChatML, no default system turn)."""

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}")
"""Mistral-7B-Instruct-v0.2's template (no system role)."""

GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")
"""Gemma 3's template with string contents (Gemma 2's, plus a system turn folded into the
first user turn)."""

PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")
"""Phi-3-mini-4k-instruct's template."""

SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}
"""Every family's size: 64 wide, 2 layers, 4 heads of 16, 2 key/value heads."""


@dataclass(frozen=True)
class Family:
    """How one family's tiny folder is made, and what entrena should find in it.

    Attributes:
        config_class: The transformers config class.
        config: Its keyword arguments beyond :data:`SHAPE` and the token ids.
        template: The chat template.
        stop: The token that ends an assistant turn (what generation stops at).
        tokens: ``{"bos": …, "eos": …, "pad": …}`` and the turn markers (``extra``), added
            to SmolLM2's vocabulary as special tokens unless already there.
        sentencepiece: A sentencepiece tokenizer trained here (``tokenizer_class``, its
            trainer's settings) instead of SmolLM2's.
        lora_targets: The decoder layers' linear projections (what ``all-linear`` adapts).
        tied: The output head shares the embedding matrix.
    """

    config_class: str
    config: dict[str, Any]
    template: str
    stop: str
    tokens: dict[str, Any]
    lora_targets: tuple[str, ...]
    tied: bool = False
    sentencepiece: dict[str, Any] = field(default_factory=dict)


_UNFUSED = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")

FAMILIES: dict[str, Family] = {
    "llama": Family(  # Llama 3.2: tied head, llama3 rope scaling, base EOS kept
        "LlamaConfig", {"tie_word_embeddings": True, "rope_parameters": {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 128}},
        LLAMA3_TEMPLATE, "<|eot_id|>",
        {"bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|finetune_pad|>",
         "extra": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]},
        _UNFUSED, tied=True),
    "qwen2": Family(
        "Qwen2Config", {"tie_word_embeddings": True}, QWEN25_TEMPLATE, "<|im_end|>",
        {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>", "extra": []},
        _UNFUSED, tied=True),
    "qwen3": Family(
        "Qwen3Config", {"head_dim": 16, "tie_word_embeddings": True}, QWEN3_TEMPLATE,
        "<|im_end|>", {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>", "extra": []},
        _UNFUSED, tied=True),
    "mistral": Family(
        "MistralConfig", {"sliding_window": None}, MISTRAL_TEMPLATE, "</s>",
        {"bos": "<s>", "eos": "</s>", "pad": None, "extra": ["[INST]", "[/INST]"]}, _UNFUSED),
    "gemma2": Family(
        "Gemma2Config", {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 256},
        GEMMA_TEMPLATE, "<end_of_turn>",
        {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>",
         "extra": ["<start_of_turn>", "<end_of_turn>"]}, _UNFUSED, tied=True,
        sentencepiece={"tokenizer_class": "GemmaTokenizer", "pad_id": 0, "eos_id": 1,
                       "bos_id": 2, "unk_id": 3, "pad_piece": "<pad>", "eos_piece": "<eos>",
                       "bos_piece": "<bos>", "add_dummy_prefix": False}),
    "gemma3_text": Family(
        "Gemma3TextConfig", {"head_dim": 16, "query_pre_attn_scalar": 16,
                             "sliding_window": 256},
        GEMMA_TEMPLATE, "<end_of_turn>",
        {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>",
         "extra": ["<start_of_turn>", "<end_of_turn>"]}, _UNFUSED, tied=True),
    "phi3": Family(
        "Phi3Config", {"tie_word_embeddings": False}, PHI3_TEMPLATE, "<|end|>",
        {"bos": "<s>", "eos": "<|endoftext|>", "pad": "<|endoftext|>",
         "extra": ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]},
        ("down_proj", "gate_up_proj", "o_proj", "qkv_proj"),
        sentencepiece={"tokenizer_class": "LlamaTokenizer", "unk_id": 0, "bos_id": 1,
                       "eos_id": 2, "pad_id": -1, "bos_piece": "<s>", "eos_piece": "</s>",
                       "add_dummy_prefix": True, "legacy": True, "add_bos_token": False,
                       "rstrip": ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
                                  "</s>"]}),
    "smollm": Family(  # SmolLM2 as published: a tied Llama with its own tokenizer
        "LlamaConfig", {"tie_word_embeddings": True}, "", "<|im_end|>",
        {"bos": None, "eos": None, "pad": None, "extra": []}, _UNFUSED, tied=True),
}
"""The families, by the name the tests use (``gemma3_text`` is Gemma 3's text model)."""


def sentencepiece_available() -> bool:
    """Whether ``sentencepiece`` imports (Gemma 2 and Phi-3 folders need it to be built)."""
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        return False
    return True


def _corpus() -> list[str]:
    """A few hundred lines of the tests' chat text (test_llm_sft.chats, and plain words)."""
    good = ["tasty", "lovely", "excellent", "perfect", "delicious", "wonderful"]
    bad = ["stale", "bitter", "broken", "awful", "bland", "late"]
    lines = []
    for i in range(400):
        word = (good if i % 2 == 0 else bad)[i % 6]
        lines.append(f"Review: the coffee was {word} ({i}). Great or other?")
        lines.append("great" if i % 2 == 0 else "other")
    lines += ["You are a helpful assistant. Answer in one word.",
              "hello there, how are you today? The quick brown fox jumps over the lazy dog.",
              "user model assistant system"] * 20
    return lines


def _sentencepiece_tokenizer(family: Family, work: Path) -> Any:
    """A sentencepiece BPE model trained on :func:`_corpus`, as the family's transformers
    tokenizer (``tokenizer.model`` is left in ``work``)."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    spec = dict(family.sentencepiece)
    tokenizer_class = spec.pop("tokenizer_class")
    legacy, add_bos = spec.pop("legacy", False), spec.pop("add_bos_token", True)
    spec.pop("rstrip", None)
    work.mkdir(parents=True, exist_ok=True)
    pieces = {spec[k] for k in ("bos_piece", "eos_piece", "pad_piece") if k in spec}
    extra = [t for t in family.tokens["extra"] + [family.tokens["eos"]] if t not in pieces]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus()), model_prefix=str(work / "tokenizer"),
        model_type="bpe", vocab_size=400, character_coverage=1.0, byte_fallback=True,
        split_digits=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, hard_vocab_limit=False,
        user_defined_symbols=list(dict.fromkeys(extra)), unk_piece="<unk>",
        num_threads=1, minloglevel=2, **spec)
    settings = {"tokenizer_class": tokenizer_class, "unk_token": "<unk>",
                "bos_token": family.tokens["bos"], "eos_token": family.tokens["eos"],
                "pad_token": family.tokens["pad"], "add_bos_token": add_bos,
                "add_eos_token": False, "legacy": legacy}
    (work / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return AutoTokenizer.from_pretrained(str(work), use_fast=True)


def _bpe_tokenizer(family: Family, tokenizer_dir: str) -> Any:
    """SmolLM2's tokenizer with the family's special tokens added."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokens = family.tokens
    named = {f"{k}_token": tokens[k] for k in ("bos", "eos", "pad") if tokens.get(k)}
    new = [t for t in [*named.values(), *tokens["extra"]] if t not in tokenizer.get_vocab()]
    if new:
        tokenizer.add_special_tokens({"additional_special_tokens": list(dict.fromkeys(new))},
                                     replace_extra_special_tokens=False)
    for key, token in named.items():
        setattr(tokenizer, key, token)
    return tokenizer


def _mark_special(tokenizer: Any, folder: Path, rstrip: list[str]) -> None:
    """List the special tokens under ``added_tokens_decoder`` in ``tokenizer_config.json``,
    as the published folders (saved by transformers 4) do: llama.cpp's converter types a
    sentencepiece vocabulary's tokens from it (control tokens: never text), and transformers
    5 no longer writes it. Tokens of ``rstrip`` eat the whitespace after them (Phi-3's turn
    markers, as in its published tokenizer.json and as llama.cpp reads any Phi-3's)."""
    tokens_file = folder / "tokenizer.json"
    backend = json.loads(tokens_file.read_text(encoding="utf-8"))
    for added in backend["added_tokens"]:
        if added["content"] in rstrip:
            added["rstrip"] = True
    tokens_file.write_text(json.dumps(backend, ensure_ascii=False), encoding="utf-8")
    config_file = folder / "tokenizer_config.json"
    settings = json.loads(config_file.read_text(encoding="utf-8"))
    special = dict.fromkeys([*tokenizer.all_special_tokens, *FAMILY_SPECIALS])
    decoder = {}
    for token in special:
        index = tokenizer.convert_tokens_to_ids(token)
        if isinstance(index, int) and index != tokenizer.unk_token_id or token == "<unk>":
            decoder[str(index)] = {"content": token, "lstrip": False, "normalized": False,
                                   "rstrip": token in rstrip, "single_word": False,
                                   "special": True}
    settings["added_tokens_decoder"] = decoder
    settings["add_bos_token"] = bool(tokenizer.add_bos_token)
    settings["add_eos_token"] = False
    config_file.write_text(json.dumps(settings, indent=2), encoding="utf-8")


FAMILY_SPECIALS = ("<unk>", "<s>", "</s>", "<pad>", "<bos>", "<eos>", "<start_of_turn>",
                   "<end_of_turn>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>",
                   "<|end|>")
"""Tokens that are special wherever a sentencepiece family's vocabulary holds them."""


def family_folder(family: str, directory: Path, tokenizer_dir: str, *, seed: int = 0) -> Path:
    """Write a tiny random-weight model of ``family`` into ``directory/family`` (once: an
    existing complete folder is returned as it is).

    Args:
        family: A key of :data:`FAMILIES`.
        directory: Where the folder is made.
        tokenizer_dir: SmolLM2's tokenizer folder (the ``smol_tokenizer`` fixture).
        seed: Seeds the weights.

    Returns:
        The folder (``config.json``, ``model.safetensors``, the tokenizer files with the
        chat template, and ``tokenizer.model`` for the sentencepiece families).
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    spec = FAMILIES[family]
    folder = Path(directory) / family
    if (folder / "model.safetensors").is_file():
        return folder
    work = Path(directory) / f".{family}-tokenizer"
    if spec.sentencepiece:
        tokenizer = _sentencepiece_tokenizer(spec, work)
    else:
        tokenizer = _bpe_tokenizer(spec, tokenizer_dir)
    if spec.template:
        tokenizer.chat_template = spec.template
    ids = {f"{k}_token_id": (tokenizer.convert_tokens_to_ids(spec.tokens[k])
                             if spec.tokens.get(k) else getattr(tokenizer, f"{k}_token_id"))
           for k in ("bos", "eos", "pad")}
    config = getattr(transformers, spec.config_class)(
        **SHAPE, vocab_size=len(tokenizer), **ids, **spec.config)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    tmp = folder.with_name(f".{family}-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if spec.sentencepiece:
        shutil.copy(work / "tokenizer.model", tmp / "tokenizer.model")
        _mark_special(tokenizer, tmp, spec.sentencepiece.get("rstrip", []))
    shutil.rmtree(work, ignore_errors=True)
    tmp.rename(folder)
    return folder
