"""llama.cpp's own Hugging Face → GGUF converter (``convert_hf_to_gguf.py``), from the source
tree of the llama.cpp runtime entrena runs.

Why this converter: it maps every decoder family llama.cpp runs (Llama, Mistral, Qwen2/3,
Gemma 2/3, Phi-3, SmolLM …: its ``conversion/`` model classes), including each family's
tensor layout (the Q/K rotary permutation of Llama-style checkpoints, fused Phi-3
projections, Gemma's norm offsets), and it identifies a BPE tokenizer's pre-tokenizer by a
hash table only it has. An unknown hash is an error there, and entrena keeps it one: forcing
a fallback (``gpt2``) silently tokenizes differently from training.

Which tree: the ``llama-cpp-python`` source distribution vendors the whole llama.cpp tree of
the commit its runtime is built from, with that commit's ``gguf-py`` (the PyPI ``gguf`` lags
it and a mismatched one fails with ``MODEL_ARCH`` AttributeErrors). entrena keeps
``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/`` of the *installed* runtime's version
(``make install-llm`` fetches them: ``python -m entrena.exporting.llama_converter``; an export
fetches them on first use otherwise). The converter's requirements file pins
``transformers<5``; measured with transformers 5.25 (issue 44, session 26): Llama, Mistral,
Qwen3, Gemma 3 and SmolLM2 folders convert and llama.cpp answers token for token as PyTorch;
families whose converter reads a SentencePiece ``tokenizer.model`` (Gemma 2, Phi-3) need
``sentencepiece`` (in the ``gguf`` extra).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from entrena.errors import DataError, ResourceError

__all__ = ["CONVERTER_PARTS", "TREE_ENV", "converter_tree", "fetch_converter",
           "convert_hf_folder", "gguf_model_name", "check_llama_cpp_computes_alike"]

log = logging.getLogger("entrena")

CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
"""What entrena keeps of the vendored llama.cpp tree (``vendor/llama.cpp/`` in the sdist)."""
TREE_ENV = "ENTRENA_LLAMA_CPP_TREE"
"""An environment variable naming a llama.cpp checkout to use instead (its root folder)."""
FETCH_COMMAND = f"{Path(sys.executable).name} -m entrena.exporting.llama_converter"


def _runtime_version() -> str:
    import importlib.metadata as md

    try:
        return md.version("llama-cpp-python")
    except md.PackageNotFoundError:
        from entrena.exporting.llama_runtime import INSTALL_HINT

        raise ResourceError("--format gguf converts with the llama.cpp of llama-cpp-python, "
                            f"which is not installed here; install it: {INSTALL_HINT}") from None


def _complete(tree: Path) -> bool:
    return all((tree / part).exists() for part in CONVERTER_PARTS)


def _homes(version: str) -> list[Path]:
    """Where a fetched tree may live: beside the interpreter (``make install-llm``), then
    entrena's cache (a read-only environment)."""
    from entrena.data.remote import default_cache_dir

    return [Path(sys.prefix) / "share" / "entrena" / f"llama.cpp-{version}",
            default_cache_dir() / f"llama.cpp-{version}"]


def converter_tree(*, fetch: bool = True) -> Path:
    """The folder holding :data:`CONVERTER_PARTS` of the installed runtime's llama.cpp.

    Looks in ``$ENTRENA_LLAMA_CPP_TREE``, then under ``sys.prefix/share/entrena`` and entrena's
    cache folder; fetches the tree (:func:`fetch_converter`) when none is there and ``fetch``.

    Raises:
        ResourceError: llama-cpp-python is missing; ``$ENTRENA_LLAMA_CPP_TREE`` lacks a part;
            no tree and ``fetch`` is false or the fetch fails (exit 2, with the command).
    """
    if os.environ.get(TREE_ENV):
        tree = Path(os.environ[TREE_ENV]).expanduser()
        if not _complete(tree):
            raise ResourceError(f"${TREE_ENV}={tree}: not a llama.cpp tree (it needs "
                                f"{', '.join(CONVERTER_PARTS)}); point it at a llama.cpp "
                                f"checkout or unset it")
        return tree
    version = _runtime_version()
    homes = _homes(version)
    for home in homes:
        if _complete(home):
            return home
    if not fetch:
        raise ResourceError(f"llama.cpp's converter for llama-cpp-python {version} is not "
                            f"here (looked in {homes[0]} and {homes[1]}); fetch it: "
                            f"{FETCH_COMMAND}")
    for home in homes:
        try:
            home.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(home.parent, os.W_OK):
            return fetch_converter(version, home)
    raise ResourceError(f"no writable folder for llama.cpp's converter ({homes[0].parent}, "
                        f"{homes[1].parent}); set ENTRENA_CACHE_DIR to a writable folder")


def fetch_converter(version: str, home: Path) -> Path:
    """Download ``llama-cpp-python==version``'s source distribution with pip (the package
    index pip is configured for; pip's cache answers offline once it was installed) and keep
    :data:`CONVERTER_PARTS` of its vendored llama.cpp in ``home``, written whole or not at
    all (a temporary folder renamed into place).

    Returns:
        ``home``.

    Raises:
        ResourceError: pip could not fetch it, or the archive has no vendored converter.
    """
    started = time.perf_counter()
    home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".fetch-") as scratch:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", f"llama-cpp-python=={version}", "-d", scratch],
            capture_output=True, text=True)
        archives = sorted(Path(scratch).glob("llama_cpp_python-*.tar.gz"))
        if done.returncode != 0 or not archives:
            last = (done.stderr.strip().splitlines() or ["no archive"])[-1]
            raise ResourceError(f"could not fetch llama-cpp-python {version}'s source (for "
                                f"llama.cpp's converter) with pip: {last}; check the package "
                                f"index, or set ${TREE_ENV} to a llama.cpp checkout")
        staged = Path(scratch) / "tree"
        with tarfile.open(archives[0]) as archive:
            members = []
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if len(parts) > 3 and parts[1:3] == ("vendor", "llama.cpp") and \
                        parts[3] in CONVERTER_PARTS:
                    member.name = str(Path(*parts[3:]))
                    members.append(member)
            archive.extractall(staged, members=members, filter="data")
        if not _complete(staged):
            raise ResourceError(f"llama-cpp-python {version}'s source has no vendored "
                                f"llama.cpp converter; set ${TREE_ENV} to a llama.cpp checkout")
        shutil.rmtree(home, ignore_errors=True)
        staged.rename(home)
    log.info("llama.cpp's converter (llama-cpp-python %s) fetched into %s in %.1f s", version,
             home, time.perf_counter() - started)
    return home


_UNKNOWN_PRE = re.compile(r"chkhsh:\s*([0-9a-f]{64})")
_UNSUPPORTED = re.compile(r"Model (\S+) is not supported")


def convert_hf_folder(folder: Path, outfile: Path, *, outtype: str = "f16",
                      model_name: str | None = None, tree: Path | None = None) -> float:
    """Convert the Hugging Face causal-LM folder ``folder`` (weights, ``config.json``, the
    tokenizer files with the chat template) into the GGUF file ``outfile`` with llama.cpp's
    converter, in a child interpreter (the converter's ``gguf-py`` first on its path).

    Args:
        outtype: The converter's ``--outtype`` (``f16``, ``bf16``, ``f32``, ``q8_0``).
        model_name: ``general.name`` in the file (default the folder's name).
        tree: The llama.cpp tree (default :func:`converter_tree`).

    Returns:
        Seconds it took.

    Raises:
        DataError: The converter does not know the tokenizer's pre-tokenizer (its hash is
            named), does not support the architecture, or needs a tokenizer file the folder
            lacks — each with the fix (exit 2).
        ResourceError: Any other converter failure (its last line).
    """
    tree = tree or converter_tree()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree / "gguf-py"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("NO_LOCAL_GGUF", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(tree / "convert_hf_to_gguf.py"), str(folder),
                           "--outfile", str(outfile), "--outtype", outtype,
                           *(["--model-name", model_name] if model_name else [])],
                          capture_output=True, text=True, env=env)
    if done.returncode == 0 and outfile.is_file():
        return time.perf_counter() - started
    outfile.unlink(missing_ok=True)
    text = done.stderr + done.stdout
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else f"exit code {done.returncode}"
    if "pre-tokenizer was not recognized" in text:
        found = _UNKNOWN_PRE.search(text)
        raise DataError(f"{folder}: llama.cpp's converter does not know this tokenizer's "
                        f"pre-tokenizer (hash {found.group(1) if found else '?'}), so it cannot "
                        f"write it to GGUF without changing how text is tokenized; train from "
                        f"the base model's own, unchanged tokenizer files, or install a newer "
                        f"llama-cpp-python whose converter knows it (entrena never forces a "
                        f"fallback pre-tokenizer)")
    unsupported = _UNSUPPORTED.search(text)
    if unsupported:
        raise DataError(f"{folder}: llama.cpp's converter cannot convert architecture "
                        f"{unsupported.group(1)}; export --format hf instead (a Hugging Face "
                        f"folder), or choose a family llama.cpp runs")
    missing = re.search(r"(?:File not found|Missing):?\s*(\S*tokenizer\.model)", text)
    if missing:
        raise DataError(f"{folder}: llama.cpp's converter reads this family's SentencePiece "
                        f"tokenizer.model, which the run's tokenizer lacks; train from the base "
                        f"model's own tokenizer files (with tokenizer.model)")
    if "No module named 'sentencepiece'" in text:
        raise ResourceError("llama.cpp's converter needs sentencepiece for this tokenizer; "
                            "install it: pip install 'entrena[gguf]'")
    raise ResourceError(f"llama.cpp's converter failed on {folder}: {last}")


def gguf_model_name(name: str, model_type: str) -> str:
    """``general.name`` of the exported file: the run's name, with ``phi3`` added for a Phi-3
    model whose name lacks it — llama.cpp strips the whitespace after Phi-3's turn markers
    only when ``general.name`` holds "phi3" or "phi-3" (``llama-vocab.cpp``; measured: a tiny
    Phi-3 named ``model`` answered 0 of 6 prompts as PyTorch, 6 of 6 named ``phi3-tuned``)."""
    lowered = name.lower()
    if model_type == "phi3" and "phi3" not in lowered and "phi-3" not in lowered:
        return f"{name}-phi3"
    return name


_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62, "gemma3_text": 62}
"""Layer counts llama.cpp reads as Gemma 2 / Gemma 3 27B (``src/models/gemma2.cpp``,
``gemma3.cpp``: the only size whose attention scale is ``1/sqrt(hidden / heads)``)."""


def check_llama_cpp_computes_alike(config: Any) -> None:
    """Refuse, before converting, a model whose settings llama.cpp's runtime ignores, so its
    GGUF would compute otherwise than PyTorch: Gemma 2/3 attention scaled by
    ``query_pre_attn_scalar``, which llama.cpp never reads (it scales by
    ``1/sqrt(head_dim)``, or ``1/sqrt(hidden / heads)`` at 27B's layer count; llama.cpp
    0.3.36's ``src/models/gemma3.cpp``). A fresh user's tiny Gemma 3 with the transformers
    default (256) against a head width of 16 failed parity at 0.000.

    Raises:
        DataError: Such a model (exit 2), with the fix.
    """
    model_type = str(getattr(config, "model_type", ""))
    config = getattr(config, "text_config", None) or config
    scalar = getattr(config, "query_pre_attn_scalar", None)
    if model_type not in _GEMMA_27B_LAYERS or scalar is None:
        return
    head_dim = getattr(config, "head_dim", None) or \
        config.hidden_size // config.num_attention_heads
    expected = (config.hidden_size / config.num_attention_heads
                if config.num_hidden_layers == _GEMMA_27B_LAYERS[model_type] else head_dim)
    if float(scalar) != float(expected):
        raise DataError(f"this {model_type} model scales attention by query_pre_attn_scalar = "
                        f"{scalar}, and llama.cpp by {expected:g} (head_dim, as every published "
                        f"Gemma but 27B): its GGUF would answer otherwise than PyTorch; set "
                        f"query_pre_attn_scalar = {expected:g} in the base model's config.json "
                        f"before training, or export --format hf")


def main() -> int:
    """``python -m entrena.exporting.llama_converter``: fetch the converter now (what ``make
    install-llm`` runs), print where it is."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(converter_tree())
    except ResourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
