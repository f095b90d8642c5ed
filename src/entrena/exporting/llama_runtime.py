"""The llama.cpp runtime (``llama-cpp-python``, the ``gguf`` extra): quantising a GGUF file
and greedy generation from one, as Ollama, LM Studio and llama.cpp run it.

``llama-cpp-python`` is built from its source distribution (no prebuilt wheel of it loads on
Debian 12's glibc 2.36): ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
-DGGML_F16C=ON" pip install 'entrena[gguf]'`` takes about 5 minutes on 2 cores. A native
build (``-DGGML_NATIVE=ON``) can die with "Illegal instruction" on another CPU of the same
family, so the portable flags are the ones entrena documents.
"""

from __future__ import annotations

import ctypes
import logging
import time
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError, ResourceError

__all__ = ["INSTALL_HINT", "MAIN_TYPES", "QUANTIZATIONS", "require_runtime", "quantize_gguf",
           "GgufRunner"]

log = logging.getLogger("entrena")

INSTALL_HINT = ("CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON\" "
                "pip install 'entrena[gguf]'  (builds llama-cpp-python from source, about 5 "
                "minutes on 2 cores)")

QUANTIZATIONS = {"f16": "LLAMA_FTYPE_MOSTLY_F16", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
                 "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}
"""``--quantize`` values of ``--format gguf`` → llama.cpp's file type (``llama.h``)."""
MAIN_TYPES = {"f16": ("F16",), "q8_0": ("Q8_0",), "q4_k_m": ("Q4_K", "Q6_K")}
"""The tensor types each file type is made of by design (llama.cpp's Q4_K_M keeps some
tensors in Q6_K); any other type but F32 (norms) in a file is a fallback."""


def require_runtime(what: str) -> Any:
    """The ``llama_cpp`` module.

    Args:
        what: What needs it, for the message (``--format gguf``).

    Raises:
        ResourceError: ``llama-cpp-python`` is not installed or does not load (exit 2); the
            message says what to install.
    """
    try:
        import llama_cpp
    except (ImportError, OSError) as exc:
        raise ResourceError(f"{what} needs the llama.cpp runtime, llama-cpp-python, which is "
                            f"not installed here ({type(exc).__name__}: {exc}); install it: "
                            f"{INSTALL_HINT}") from None
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its C logs go through it
    return llama_cpp


def quantize_gguf(source: Path, target: Path, quantization: str, *,
                  threads: int | None = None) -> float:
    """llama.cpp's quantiser (what ``llama-quantize`` runs): ``source`` (an f16 or f32 GGUF) into
    ``target`` as ``quantization``.

    K-quants need rows that are multiples of 256 values; llama.cpp writes the tensors where
    that fails in a fallback type (:func:`~entrena.exporting.gguf_reader.tensor_types` reads
    what it chose).

    Args:
        quantization: A key of :data:`QUANTIZATIONS`.
        threads: CPU threads (default: the free cores,
            :func:`~entrena.hardware.threads.choose_threads`).

    Returns:
        Seconds it took.

    Raises:
        ConfigError: Unknown quantisation.
        ResourceError: The runtime is missing, or llama.cpp reports a failure.
    """
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantize {quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    llama_cpp = require_runtime("--format gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANTIZATIONS[quantization])
    from entrena.hardware.threads import choose_threads

    choice = choose_threads(threads)
    log.info("llama.cpp quantiser: %s", choice.describe())
    params.nthread = choice.threads
    started = time.perf_counter()
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(),
                                          ctypes.byref(params))
    if code != 0:
        raise ResourceError(f"llama.cpp could not quantise {source} to {quantization} (code "
                            f"{code}); see its messages above")
    return time.perf_counter() - started


class GgufRunner:
    """A GGUF model loaded in llama.cpp, generating greedily.

    Args:
        path: The GGUF file.
        context_tokens: Context window (prompt + generation), in tokens.
        threads: CPU threads (default: the free cores,
            :func:`~entrena.hardware.threads.choose_threads`; logged).

    Attributes:
        threads: The CPU threads it runs on.

    Raises:
        ResourceError: The runtime is missing or cannot load the file.
    """

    def __init__(self, path: Path, *, context_tokens: int = 2048, threads: int | None = None):
        from entrena.hardware.threads import choose_threads

        llama_cpp = require_runtime(f"running {path.name}")
        choice = choose_threads(threads)
        log.info("llama.cpp: %s", choice.describe())
        self.threads = threads = choice.threads
        try:
            # n_threads_batch too: llama-cpp-python's default for prompt processing is every
            # core, which on a shared machine waits on descheduled threads (several times
            # slower than the one thread asked for).
            self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=int(context_tokens),
                                       n_threads=threads, n_threads_batch=threads,
                                       n_batch=512, verbose=False)
        except ValueError as exc:  # llama-cpp-python's "Failed to load model from file"
            raise ResourceError(f"{path}: llama.cpp cannot load it ({exc})") from None
        self.metadata: dict[str, str] = dict(self.llm.metadata)
        self.eos_token_id = int(self.llm.token_eos())

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` as llama.cpp reads a rendered prompt (special tokens such
        as ``<|im_start|>`` parsed), with a BOS first when the file asks for one and the text
        does not begin with it already: Gemma's and Llama 3's templates write the BOS
        themselves, and llama.cpp's tokenizer would add a second one (measured: a tiny Gemma
        2's prompts read as ``[2, 2, 4, …]`` against training's ``[2, 4, …]``)."""
        ids = list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))
        bos = int(self.llm.token_bos())
        if self._add_bos() and bos >= 0 and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def _add_bos(self) -> bool:
        return self.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"

    def generate(self, prompt: list[int], *, max_new_tokens: int,
                 stop: tuple[int, ...] = ()) -> list[int]:
        """Greedy continuation of ``prompt`` (ids), EOS (or a ``stop`` id) included when
        reached within ``max_new_tokens``."""
        out: list[int] = []
        ends = {self.eos_token_id, *stop}
        if max_new_tokens < 1:
            return out
        for token in self.llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                       repeat_penalty=1.0, reset=True):
            out.append(int(token))
            if token in ends or len(out) >= max_new_tokens:
                break
        return out

    def detokenize(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens left out."""
        return self.llm.detokenize(ids, special=False).decode("utf-8", errors="replace")
