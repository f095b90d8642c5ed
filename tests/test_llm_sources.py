"""Base models of ``task: llm-sft`` from GGUF files: any family transformers reads (a tiny
random Qwen3 and Llama written here with the ``gguf`` package and SmolLM2's tokenizer), a
model pulled into Ollama (a fake store laid out as Ollama lays it out: manifest + blobs),
and bad input (truncated file, a family transformers cannot read, a model not pulled, no
store) refused with one line before any heavy work."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from conftest import run_cli
from entrena.config.models import MODEL_ALIASES
from entrena.errors import ConfigError
from entrena.tasks.llm_sft.gguf_file import GGUF_CAUSAL_ARCHITECTURES, check_gguf
from entrena.tasks.llm_sft.ollama import parse_ollama_name, resolve_ollama
from entrena.tasks.llm_sft.sources import check_llm_source, resolve_llm_source, source_record

gguf = pytest.importorskip("gguf")

SMOL = MODEL_ALIASES["smollm2-135m"]
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "tie_word_embeddings": True}
_TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                   "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                   "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                   "tokenizer.ggml.padding_token_id", "tokenizer.chat_template")


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row order for the ``llama`` architecture (``convert_hf_to_gguf.py``,
    ``LlamaModel.permute``), which transformers' reader undoes."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]
                           ).swapaxes(1, 2).reshape(weights.shape)


FAMILIES = {  # family: (transformers config class, GGUF architecture, extra settings)
    "llama": ("LlamaConfig", "llama", {}),
    "mistral": ("MistralConfig", "llama", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "qwen2", {}),
    "qwen3": ("Qwen3Config", "qwen3", {"head_dim": 8}),
    "gemma2": ("Gemma2Config", "gemma2", {"head_dim": 8, "query_pre_attn_scalar": 8,
                                          "sliding_window": 128}),
    "gemma3": ("Gemma3TextConfig", "gemma3", {"head_dim": 8, "query_pre_attn_scalar": 8,
                                              "sliding_window": 128}),
    "phi3": ("Phi3Config", "phi3", {"pad_token_id": 2}),
}


def llama3_rope_freqs(dim: int, theta: float, factor: float, low: float, high: float,
                      original: int) -> np.ndarray:
    """``rope_freqs`` as llama.cpp's converter computes it for Llama 3.1+ (written out
    here, independently of entrena's fit)."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    out = []
    for freq in freqs:
        wavelength = 2 * np.pi / freq
        if wavelength < original / high:
            out.append(1.0)
        elif wavelength > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _add_metadata(writer, config, arch: str, head_dim: int) -> None:
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    rope = config.rope_parameters
    rope = rope.get("full_attention", rope)
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    if arch in ("gemma2", "gemma3"):
        writer.add_sliding_window(config.sliding_window)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)


def _gguf_tensors(model, family: str, arch: str, config, quantize: str | None
                  ) -> list[tuple[str, np.ndarray, Any]]:
    """The model's tensors as llama.cpp's converter writes them: its names, Llama's Q/K row
    order, Gemma's norms stored as 1 + weight, Llama 3's ``rope_freqs``."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], config.num_hidden_layers)
    out = []
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        data = tensor.float().numpy()
        if arch == "llama" and name.endswith("q_proj.weight"):
            data = _permute(data, config.num_attention_heads)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            data = _permute(data, config.num_key_value_heads)
        elif family.startswith("gemma") and name.endswith("norm.weight"):
            data = data + 1
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert target is not None, name
        if data.ndim == 2 and quantize and "embed" not in name:
            kind = gguf.GGMLQuantizationType[quantize]
            out.append((target, gguf.quants.quantize(data, kind), kind))
        else:
            out.append((target, data.astype(np.float16) if data.ndim == 2 else data, None))
    rope = config.rope_parameters
    if rope.get("rope_type") == "llama3":
        out.append(("rope_freqs.weight", llama3_rope_freqs(
            config.head_dim, rope["rope_theta"], rope["factor"], rope["low_freq_factor"],
            rope["high_freq_factor"], rope["original_max_position_embeddings"]), None))
    return out


@functools.cache
def smol_tokenizer_fields() -> dict[str, tuple[Any, Any]]:
    """SmolLM2's tokenizer key/values (``{key: (GGUF value type, value)}``), read once."""
    reader = gguf.GGUFReader(str(SMOL.path()))
    return {key: (reader.fields[key].types[0], reader.fields[key].contents())
            for key in _TOKENIZER_KEYS}


def write_tiny_gguf(path: Path, family: str, quantize: str | None = None,
                    skip: tuple[str, ...] = (), **overrides) -> torch.nn.Module:
    """A random model of ``family`` (:data:`FAMILIES`) as a GGUF file with SmolLM2's
    tokenizer and chat template (copied from the alias's file), as llama.cpp's converter
    names and lays out its tensors: matrices in f16, or, but for the embeddings, in
    ``quantize`` blocks (``Q8_0``, the model's weights then set to what the blocks hold);
    returns the Hugging Face model
    it was written from."""
    import transformers

    tokenizer = smol_tokenizer_fields()
    vocab = len(tokenizer["tokenizer.ggml.tokens"][1])
    class_name, arch, extra = FAMILIES[family]
    config = getattr(transformers, class_name)(**{**TINY, "vocab_size": vocab, **extra,
                                                  **overrides})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # random norms and sharp attention, so that a norm, attention
        for name, parameter in model.named_parameters():  # scale or RoPE read wrongly shows
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight", "qkv_proj.weight")):
                parameter.mul_(8.0)
            if quantize and parameter.ndim == 2 and "embed" not in name:  # (numpy: slow)
                kind = gguf.GGMLQuantizationType[quantize]
                blocks = gguf.quants.quantize(parameter.numpy(), kind)
                parameter.copy_(torch.from_numpy(gguf.quants.dequantize(blocks, kind)))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // \
        config.num_attention_heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(family.capitalize())
    _add_metadata(writer, config, arch, head_dim)
    for key, (kind, value) in tokenizer.items():
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
    for name, data, kind in _gguf_tensors(model, family, arch, config, quantize):
        if name not in skip:
            writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def converted_logits_difference(tmp_path: Path, family: str, quantize: str | None = None,
                                **overrides) -> tuple[float, Any]:
    """Write a tiny ``family`` GGUF, convert it as a base model, and return the largest
    logit difference from the model written, and the converted model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path / f"tiny-{family}.gguf"
    original = write_tiny_gguf(path, family, quantize, **overrides)
    folder = Path(resolve_llm_source(str(path), None, tmp_path / "cache"))
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert "<|im_start|>" in tokenizer.chat_template
    ids = torch.tensor([tokenizer("The coffee was lovely, great or other? " * 20)["input_ids"]])
    with torch.no_grad():
        return (model(ids).logits - original(ids).logits).abs().max().item(), model


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", quantize="Q8_0")  # quantised, as Ollama's models are
    return path


def fake_ollama_store(root: Path, name: str, tag: str, gguf_file: Path, *,
                      namespace: str = "library", link: bool = True) -> str:
    """An Ollama store (``manifests/registry.ollama.ai/<namespace>/<name>/<tag>`` + the
    ``blobs/sha256-<hex>`` files) holding ``gguf_file`` (symlinked), a template and params
    layer; returns the model layer's digest."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes | None, media: str, source: Path | None = None) -> dict:
        digest = hashlib.sha256(data if data is not None else source.read_bytes()).hexdigest()
        target = blobs / f"sha256-{digest}"
        if not target.exists():
            if data is not None:
                target.write_bytes(data)
            else:
                target.symlink_to(source) if link else target.write_bytes(source.read_bytes())
        size = len(data) if data is not None else source.stat().st_size
        return {"mediaType": media, "digest": f"sha256:{digest}", "size": size}

    layers = [blob(None, "application/vnd.ollama.image.model", gguf_file),
              blob(b"{{ .System }}<|im_start|>user\n{{ .Prompt }}<|im_end|>",
                   "application/vnd.ollama.image.template"),
              blob(json.dumps({"stop": ["<|im_end|>"]}).encode(),
                   "application/vnd.ollama.image.params")]
    config = blob(json.dumps({"model_format": "gguf", "model_family": "llama"}).encode(),
                  "application/vnd.docker.container.image.v1+json")
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config, "layers": layers}), encoding="utf-8")
    return layers[0]["digest"]


# --- any family transformers reads ----------------------------------------------------------

def test_a_quantised_qwen3_gguf_becomes_a_base_model_that_computes_as_written(tmp_path):
    """Qwen3 in Q8_0 blocks with a head width of 8 (not its class default of 128): the
    file's ``key_length`` reaches the config, the blocks are dequantised, the logits agree
    with the model written, and the tokenizer keeps the file's chat template; the
    conversion leaves no temporary folder."""
    difference, model = converted_logits_difference(tmp_path, "qwen3", quantize="Q8_0")
    path = tmp_path / "tiny-qwen3.gguf"
    assert check_llm_source(str(path), None) == f"gguf:{path}"
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.head_dim == 8
    assert difference < 1e-2  # the f16 weights' rounding
    models = tmp_path / "cache" / "models"
    assert [p.name[:11] for p in models.iterdir()] == ["tiny-qwen3-"]


def test_llama3_rope_scaling_is_carried_over_from_rope_freqs(tmp_path):
    """Llama 3.1+ files hold their RoPE scaling as the tensor ``rope_freqs``, which
    transformers' reader drops: refitted here, the logits agree to 7e-4 at 181 tokens
    (transformers alone: 0.038 apart; measured with this test's model)."""
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}
    difference, model = converted_logits_difference(
        tmp_path, "llama", hidden_size=64, rope_parameters=rope)
    assert model.config.rope_parameters["rope_type"] == "llama3"
    assert model.config.rope_parameters["factor"] == 32.0
    assert difference < 5e-3


def test_a_gguf_missing_weights_is_refused_rather_than_left_random(tmp_path):
    path = tmp_path / "partial.gguf"
    write_tiny_gguf(path, "qwen3", skip=("blk.1.ffn_down.weight",))
    with pytest.raises(ConfigError, match=r"partial.gguf: transformers read only part of this "
                                          r"GGUF file: 1 weights missing \(model.layers.1.mlp"
                                          r".down_proj.weight\)") as caught:
        resolve_llm_source(str(path), None, tmp_path / "cache")
    assert "\n" not in str(caught.value)
    assert not any((tmp_path / "cache" / "models").iterdir())  # nothing half-written


@pytest.mark.slow
@pytest.mark.parametrize("family", ["mistral", "qwen2", "gemma2", "gemma3", "phi3"])
def test_each_family_gguf_becomes_a_base_model_that_computes_as_written(tmp_path, family):
    difference, _ = converted_logits_difference(tmp_path, family)
    assert difference < 1e-2


def test_the_gguf_families_match_what_the_installed_transformers_reads():
    """:data:`GGUF_CAUSAL_ARCHITECTURES` is the installed transformers' list (in llama.cpp's
    spelling), less the encoder-decoders: an upgrade that adds a family shows up here."""
    pytest.importorskip("transformers.integrations.gguf")
    from transformers.integrations.gguf import GGUF_ARCHS
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    spelled = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gpt_oss": "gpt-oss",
               "minimax_m2": "minimax-m2"}
    readable = {spelled.get(a, a) for a in GGUF_SUPPORTED_ARCHITECTURES} | set(GGUF_ARCHS)
    assert readable - {"general", "tokenizer", "t5", "umt5"} == GGUF_CAUSAL_ARCHITECTURES


def test_a_family_transformers_cannot_read_is_named_with_the_fix(tmp_path):
    path = tmp_path / "command-r.gguf"
    writer = gguf.GGUFWriter(str(path), "command-r")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ConfigError) as caught:
        check_llm_source(str(path), None)
    message = str(caught.value)
    assert "architecture is 'command-r'" in message and "Hugging Face folder" in message
    assert "qwen3" in message and "\n" not in message


def test_a_truncated_gguf_is_refused_with_its_length_before_any_conversion(tmp_path):
    data = SMOL.path().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(ConfigError, match=rf"cut.gguf: truncated: {len(data) // 2:,} of "
                                          rf"{len(data):,} bytes") as caught:
        resolve_llm_source(str(cut), None, tmp_path / "cache")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "cache").exists()  # nothing half-written
    cut.write_bytes(data[:1000])  # inside the header
    with pytest.raises(ConfigError, match="truncated: 1,000 bytes, and its header"):
        check_gguf(cut)
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        check_gguf(tmp_path / "notes.gguf")


def test_a_gguf_path_is_read_relative_to_the_config_and_a_missing_one_named(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "smol.gguf").symlink_to(SMOL.path())
    found = check_llm_source("models/smol.gguf", tmp_path)
    assert found == f"gguf:{tmp_path / 'models' / 'smol.gguf'}"
    with pytest.raises(ConfigError, match=r"model.name: .*gone.gguf does not exist; point "
                                          r"model.name to a GGUF model file"):
        check_llm_source("gone.gguf", tmp_path)


# --- Ollama ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("ollama:qwen2.5:0.5b", ("registry.ollama.ai", "library", "qwen2.5", "0.5b")),
    ("ollama:llama3.2", ("registry.ollama.ai", "library", "llama3.2", "latest")),
    ("ollama:me/mine:v1", ("registry.ollama.ai", "me", "mine", "v1")),
    ("ollama:hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M",
     ("hf.co", "bartowski", "SmolLM2-135M-Instruct-GGUF", "Q4_K_M")),
])
def test_ollama_names_are_read_as_ollama_reads_them(text, expected):
    name = parse_ollama_name(text)
    assert (name.host, name.namespace, name.model, name.tag) == expected


@pytest.mark.parametrize("text", ["ollama:", "ollama:../etc:x", "ollama:a/b/c/d:e",
                                  "ollama:qwen2.5:0.5b:extra", "ollama:my.ns/model"])
def test_a_name_ollama_would_not_take_is_refused_with_the_form(text):
    with pytest.raises(ConfigError, match=r"is not an Ollama model name; write "
                                          r"ollama:NAME\[:TAG\]"):
        parse_ollama_name(text)


def test_an_ollama_model_resolves_to_its_gguf_blob_and_records_its_digest(tmp_path,
                                                                          monkeypatch):
    store = tmp_path / "ollama"
    digest = fake_ollama_store(store, "smollm2", "135m", SMOL.path())
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    found = resolve_ollama("ollama:smollm2:135m")
    assert found.digest == digest and found.blob.name == digest.replace(":", "-")
    assert found.blob.resolve() == SMOL.path().resolve()
    assert "{{ .Prompt }}" in found.texts["template"]
    assert check_llm_source("ollama:smollm2:135m", None) == "ollama:smollm2:135m"
    record = source_record("ollama:SmolLM2:135m", None)  # Ollama's names ignore case
    assert record["kind"] == "ollama" and record["digest"] == digest
    assert record["name"] == "SmolLM2:135m" and json.loads(record["params"])["stop"]


def test_an_ollama_model_not_pulled_says_ollama_pull(tmp_path, monkeypatch):
    store = tmp_path / "ollama"
    fake_ollama_store(store, "smollm2", "135m", SMOL.path())
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    with pytest.raises(ConfigError, match=r"run `ollama pull qwen2.5:0.5b`") as caught:
        check_llm_source("ollama:qwen2.5:0.5b", None)
    assert str(store / "manifests") in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"`ollama pull smollm2:latest`"):
        check_llm_source("ollama:smollm2", None)  # the tag defaults to latest


def test_no_ollama_store_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    with pytest.raises(ConfigError, match="no Ollama model store found") as caught:
        check_llm_source("ollama:qwen2.5:0.5b", None)
    assert str(tmp_path / ".ollama" / "models") in str(caught.value)
    assert "OLLAMA_MODELS" in str(caught.value)


def test_an_ollama_model_without_a_gguf_layer_says_to_use_a_folder(tmp_path, monkeypatch):
    """Ollama's newer engine can store a model as safetensors tensor layers, no GGUF."""
    store = tmp_path / "ollama"
    fake_ollama_store(store, "smollm2", "135m", SMOL.path())
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m"
    document = json.loads(manifest.read_text())
    for layer in document["layers"]:
        layer["mediaType"] = layer["mediaType"].replace(
            "image.model", "image.tensor; name=x; dtype=BF16; shape=1")
    manifest.write_text(json.dumps(document))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    with pytest.raises(ConfigError, match="has no GGUF model layer .*Hugging Face folder"):
        check_llm_source("ollama:smollm2:135m", None)


def test_a_truncated_ollama_blob_says_pull_again(tmp_path, monkeypatch):
    data = SMOL.path().read_bytes()
    (tmp_path / "half.gguf").write_bytes(data[:len(data) - 4096])
    store = tmp_path / "ollama"
    fake_ollama_store(store, "smollm2", "135m", tmp_path / "half.gguf")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    with pytest.raises(ConfigError, match=r"truncated: .*`ollama pull smollm2:135m` again"):
        check_llm_source("ollama:smollm2:135m", None)


def _write_chats(path: Path, count: int) -> None:
    rows = [{"messages": [{"role": "user", "content": f"Review {i}: the tea was "
                           f"{'lovely' if i % 2 else 'stale'}. Great or other?"},
                          {"role": "assistant", "content": "great" if i % 2 else "other"}]}
            for i in range(count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_train_adapts_the_model_ollama_runs_and_records_where_it_came_from(tmp_path,
                                                                           tiny_llama):
    store = tmp_path / "ollama"
    digest = fake_ollama_store(store, "tiny", "latest", tiny_llama)
    _write_chats(tmp_path / "train.jsonl", 16)
    cfg = {"name": "from-ollama", "task": "llm-sft",
           "data": {"train": "train.jsonl", "validation_fraction": 0.25,
                    "cache_dir": str(tmp_path / "cache")},
           "model": {"name": "ollama:tiny", "max_length": 64},
           "train": {"max_steps": 2, "batch_size": 4, "num_threads": 1},
           "tracking": {"enabled": False}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", "--run-dir", "run", cwd=tmp_path,
                     OLLAMA_MODELS=str(store))
    assert result.returncode == 0, result.stderr[-3000:]
    meta = json.loads((tmp_path / "run" / "model" / "entrena_model.json").read_text())
    assert meta["base_source"]["kind"] == "ollama"
    assert meta["base_source"]["name"] == "tiny:latest"
    assert meta["base_source"]["digest"] == digest
    assert Path(meta["base_model"]).name.startswith(f"ollama-tiny-latest-{digest[7:23]}")


def test_an_ollama_model_not_pulled_exits_2_at_the_command_line(tmp_path):
    store = tmp_path / "ollama"
    (store / "manifests").mkdir(parents=True)
    _write_chats(tmp_path / "train.jsonl", 8)
    cfg = {"name": "x", "task": "llm-sft", "data": {"train": "train.jsonl"},
           "model": {"name": "ollama:qwen2.5:0.5b"}, "tracking": {"enabled": False}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", cwd=tmp_path, timeout=120,
                     OLLAMA_MODELS=str(store))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[-1]] and "`ollama pull qwen2.5:0.5b`" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_real_smollm2_pulled_into_ollama_trains_two_steps(tmp_path):
    """The real model of the alias, as a fake Ollama store holds it (its blob a link to the
    alias's file): converted once (about half a minute on 2 cores), then two LoRA steps."""
    store = tmp_path / "ollama"
    digest = fake_ollama_store(store, "smollm2", "135m", SMOL.path())
    _write_chats(tmp_path / "train.jsonl", 16)
    cfg = {"name": "smollm2-from-ollama", "task": "llm-sft",
           "data": {"train": "train.jsonl", "validation_fraction": 0.25,
                    "cache_dir": str(tmp_path / "cache")},
           "model": {"name": "ollama:smollm2:135m", "max_length": 64},
           "train": {"max_steps": 2, "batch_size": 4, "num_threads": 2},
           "tracking": {"enabled": False}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", "--run-dir", "run", cwd=tmp_path, timeout=900,
                     OLLAMA_MODELS=str(store))
    assert result.returncode == 0, result.stderr[-3000:]
    meta = json.loads((tmp_path / "run" / "model" / "entrena_model.json").read_text())
    assert meta["base_source"] == {**meta["base_source"], "kind": "ollama",
                                   "name": "smollm2:135m", "digest": digest}


def test_the_model_card_names_the_ollama_model_and_its_digest():
    from entrena.tasks.llm_sft.card import _base_line

    line = _base_line({"kind": "ollama", "name": "qwen2.5:0.5b",
                       "digest": "sha256:" + "ab" * 32})
    assert line == ("\nThe base model is the Ollama model `qwen2.5:0.5b` "
                    "(GGUF `sha256:abababababab…`).")
    assert _base_line(None) == ""


@pytest.mark.parametrize("factor", [8.0, 32.0])  # Llama 3.1, Llama 3.2
def test_llama3_rope_settings_are_recovered_from_the_factors_llama_cpp_writes(factor):
    from entrena.tasks.llm_sft.gguf_config import llama3_rope

    freqs = llama3_rope_freqs(128, 500000.0, factor, 1.0, 4.0, 8192).tolist()
    fitted = llama3_rope(freqs, 500000.0)
    assert fitted is not None and fitted["factor"] == factor
    assert fitted["original_max_position_embeddings"] / fitted["low_freq_factor"] == 8192
    assert fitted["original_max_position_embeddings"] / fitted["high_freq_factor"] == 2048
    assert llama3_rope([1.0, 1.5, 1.0, 7.0] * 16, 500000.0) is None  # no Llama 3 scaling
