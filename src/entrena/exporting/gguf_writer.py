"""A Hugging Face Llama-architecture causal LM as a GGUF file (llama.cpp's format), with the
``gguf`` package's writer and tensor-name map.

The file is written in float32 (norms and every weight), which the llama.cpp quantiser then
turns into f16, q8_0 or q4_k_m (:mod:`entrena.exporting.llama_runtime`). Two details follow
llama.cpp's own converter (``convert_hf_to_gguf.py``, class ``LlamaModel``):

- The query and key projections are permuted. Hugging Face's Llama rotates the two halves of
  each head (``rotate_half``); llama.cpp's rope rotates adjacent pairs. Per head, rows
  ``[0, d/2)`` and ``[d/2, d)`` are interleaved: ``W.reshape(h, 2, d/2, in).swapaxes(1, 2)
  .reshape(W.shape)`` with h the query heads for Q and the key/value heads for K.
- The tokenizer is not rebuilt: its key/values (``tokenizer.ggml.*``: the token list, types,
  merges, the pre-tokenizer name and the special ids) are copied from the GGUF file the base
  model came from, whose tokenizer training used too. Rebuilding them from a Hugging Face
  tokenizer needs llama.cpp's table of pre-tokenizer hashes, which only its converter has.

The chat template written (``tokenizer.chat_template``) is the one training rendered prompts
with (the run's tokenizer), and the EOS id is the run's tokenizer's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from entrena.errors import DataError
from entrena.exporting.gguf_reader import read_gguf_header

__all__ = ["permute_rotary", "write_llama_gguf", "tensor_types"]

_COPIED_PREFIX = "tokenizer."
_SKIPPED_KEYS = ("tokenizer.chat_template", "tokenizer.ggml.eos_token_id")


def permute_rotary(weight: Any, heads: int) -> Any:
    """A Q or K projection in llama.cpp's rope layout (see the module docstring).

    Args:
        weight: (heads · d, in) float array, Hugging Face layout (d head size).
        heads: Query heads for Q, key/value heads for K.

    Returns:
        The same shape, rows interleaved per head.
    """
    rows = weight.shape[0]
    return (weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _rope_theta(config: Any) -> float:
    theta = getattr(config, "rope_theta", None)
    if theta is None:  # transformers 5: rope settings in one dict
        theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return float(theta)


def write_llama_gguf(lm: Any, path: Path, *, tokenizer_gguf: Path, chat_template: str,
                     eos_token_id: int, name: str) -> dict[str, Any]:
    """Write ``lm`` as a float32 GGUF file of architecture ``llama``.

    Args:
        lm: A Hugging Face ``LlamaForCausalLM`` (adapters already merged).
        path: The file to write.
        tokenizer_gguf: The GGUF file whose tokenizer key/values are copied.
        chat_template: The Jinja chat template training used.
        eos_token_id: The token that ends a response.
        name: ``general.name``.

    Returns:
        ``{"tensors": count, "parameters": count, "copied_keys": [...]}``.

    Raises:
        DataError: Not a Llama-architecture model, or its vocabulary differs in size from the
            tokenizer file's.
    """
    import gguf
    import numpy as np

    config = lm.config
    if getattr(config, "model_type", None) != "llama":
        raise DataError(f"--format gguf writes Llama-architecture models (SmolLM2, Llama); "
                        f"this model is {getattr(config, 'model_type', 'unknown')!r}; use "
                        f"--format hf for a Hugging Face folder instead")
    source = read_gguf_header(tokenizer_gguf)
    tokens = source.fields.get("tokenizer.ggml.tokens")
    state = {k: v.detach().to("cpu").float().numpy() for k, v in lm.state_dict().items()}
    vocab = state["model.embed_tokens.weight"].shape[0]
    if tokens is None or len(tokens.value) != vocab:
        raise DataError(f"{tokenizer_gguf}: its tokenizer has "
                        f"{len(tokens.value) if tokens else 0} tokens and the model's embedding "
                        f"{vocab} rows; the GGUF export copies the tokenizer of the file the "
                        f"base model came from, so the model must keep that vocabulary")
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads or \
        config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    tied = bool(getattr(config, "tie_word_embeddings", False))

    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_type("model")
    writer.add_name(name)
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(heads))
    writer.add_head_count_kv(int(kv_heads))
    writer.add_rope_dimension_count(int(head_dim))
    if head_dim != config.hidden_size // heads:
        writer.add_key_length(int(head_dim))
        writer.add_value_length(int(head_dim))
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(int(vocab))
    writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    copied = []
    for key, field in source.fields.items():
        if key.startswith(_COPIED_PREFIX) and key not in _SKIPPED_KEYS:
            writer.add_key_value(key, field.value, gguf.GGUFValueType(field.type),
                                 sub_type=None if field.sub_type is None
                                 else gguf.GGUFValueType(field.sub_type))
            copied.append(key)
    writer.add_eos_token_id(int(eos_token_id))
    writer.add_chat_template(chat_template)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(config.num_hidden_layers))
    count, parameters = 0, 0
    for hf_name, array in state.items():
        if hf_name == "lm_head.weight" and tied:
            continue  # llama.cpp reuses token_embd when output.weight is absent
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        target = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise DataError(f"--format gguf: the model's tensor {hf_name!r} has no llama.cpp "
                            f"name; the model is not a plain Llama")
        if hf_name.endswith("q_proj.weight"):
            array = permute_rotary(array, heads)
        elif hf_name.endswith("k_proj.weight"):
            array = permute_rotary(array, kv_heads)
        writer.add_tensor(target, np.ascontiguousarray(array, dtype=np.float32))
        count += 1
        parameters += int(array.size)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"tensors": count, "parameters": parameters, "copied_keys": copied}


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each GGML type a GGUF file holds (``{"Q8_0": 211, "F32": 61}``)."""
    import gguf

    counts: dict[str, int] = {}
    for _, _, kind in read_gguf_header(path).tensors:
        name = gguf.GGMLQuantizationType(kind).name
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
