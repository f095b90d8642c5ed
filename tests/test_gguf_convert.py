"""llama.cpp's own converter (``entrena.exporting.llama_converter``): where its tree comes
from (the runtime's sdist, kept whole or not at all), and what it refuses: a pre-tokenizer
it does not know (never a silent fallback) and an architecture it cannot convert — each a
one-line error with the fix. The per-family conversions and their parity are in
tests/test_llm_families_gguf.py."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from test_llm_sft import smol_tokenizer  # noqa: F401

RUNTIME_REASON = "the gguf extra (llama-cpp-python) is installed by make install-llm"


def _fake_sdist(path: Path, version: str) -> None:
    """A ``llama_cpp_python-VERSION.tar.gz`` laid out as the real one (the vendored tree
    under ``vendor/llama.cpp``, with more than the converter)."""
    root = f"llama_cpp_python-{version}"
    files = {f"{root}/vendor/llama.cpp/convert_hf_to_gguf.py": "print('converter')\n",
             f"{root}/vendor/llama.cpp/conversion/__init__.py": "",
             f"{root}/vendor/llama.cpp/gguf-py/gguf/__init__.py": "",
             f"{root}/vendor/llama.cpp/src/llama.cpp": "// not kept\n",
             f"{root}/llama_cpp/__init__.py": "# not kept\n"}
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_the_converter_is_kept_from_the_runtime_sdist_and_nothing_else(tmp_path, monkeypatch):
    from entrena.exporting import llama_converter

    calls = []

    def pip(command, **kwargs):
        calls.append(command)
        _fake_sdist(Path(command[command.index("-d") + 1]) / "llama_cpp_python-9.9.9.tar.gz",
                    "9.9.9")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(llama_converter.subprocess, "run", pip)
    home = llama_converter.fetch_converter("9.9.9", tmp_path / "llama.cpp-9.9.9")
    assert "llama-cpp-python==9.9.9" in calls[0] and ":all:" in calls[0]
    kept = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert kept == ["conversion/__init__.py", "convert_hf_to_gguf.py", "gguf-py/gguf/__init__.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama.cpp-9.9.9"]


def test_a_failed_fetch_names_the_fix_and_leaves_nothing(tmp_path, monkeypatch):
    from entrena.errors import ResourceError
    from entrena.exporting import llama_converter

    monkeypatch.setattr(llama_converter.subprocess, "run", lambda command, **kwargs:
                        subprocess.CompletedProcess(command, 1, "", "ERROR: No matching "
                                                    "distribution found"))
    with pytest.raises(ResourceError, match="No matching distribution found.*ENTRENA_LLAMA"):
        llama_converter.fetch_converter("9.9.9", tmp_path / "llama.cpp-9.9.9")
    assert list(tmp_path.iterdir()) == []


def test_a_tree_named_in_the_environment_must_hold_the_converter(tmp_path, monkeypatch):
    from entrena.errors import ResourceError
    from entrena.exporting.llama_converter import converter_tree

    monkeypatch.setenv("ENTRENA_LLAMA_CPP_TREE", str(tmp_path))
    with pytest.raises(ResourceError, match="not a llama.cpp tree .*convert_hf_to_gguf.py"):
        converter_tree()


def _tiny_folder(directory: Path, tokenizer: str, config_class: str, **extra) -> Path:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    config = getattr(transformers, config_class)(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id, **extra)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tree():
    pytest.importorskip("llama_cpp", reason=RUNTIME_REASON)
    from entrena.exporting.llama_converter import converter_tree

    return converter_tree()


def test_an_unknown_pre_tokenizer_is_refused_with_its_hash_never_forced(
        tmp_path, tree, smol_tokenizer):  # noqa: F811
    """transformers 5 reads a ``qwen2`` folder's tokenizer as ``Qwen2Tokenizer`` (Qwen's own
    pre-tokenizer over SmolLM2's vocabulary): a combination no model ships, whose hash the
    converter's table lacks."""
    from entrena.errors import DataError
    from entrena.exporting.llama_converter import convert_hf_folder

    folder = _tiny_folder(tmp_path / "qwen2", smol_tokenizer, "Qwen2Config")
    with pytest.raises(DataError) as caught:
        convert_hf_folder(folder, tmp_path / "m.gguf", tree=tree)
    message = str(caught.value)
    assert "does not know this tokenizer's pre-tokenizer (hash " in message
    assert "never forces a fallback" in message and "\n" not in message
    assert not (tmp_path / "m.gguf").exists()


def test_an_architecture_the_converter_lacks_is_refused(tmp_path, tree,
                                                        smol_tokenizer):  # noqa: F811
    from entrena.errors import DataError
    from entrena.exporting.llama_converter import convert_hf_folder

    folder = _tiny_folder(tmp_path / "odd", smol_tokenizer, "LlamaConfig")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["TinyNovelForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="cannot convert architecture TinyNovelForCausalLM; "
                                        "export --format hf"):
        convert_hf_folder(folder, tmp_path / "m.gguf", tree=tree)
    assert not (tmp_path / "m.gguf").exists()


def test_a_gemma_attention_scale_llama_cpp_ignores_is_refused_before_converting():
    """llama.cpp scales Gemma's attention by 1/sqrt(head_dim) (by hidden/heads at 27B's
    layer count) and never reads query_pre_attn_scalar: a model that sets it otherwise would
    fail parity at 0.000 (a fresh user's tiny Gemma 3 did), so the export refuses it first."""
    from transformers import Gemma2Config, Gemma3TextConfig

    from entrena.errors import DataError
    from entrena.exporting.llama_converter import check_llama_cpp_computes_alike

    shape = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
             "num_hidden_layers": 2}
    check_llama_cpp_computes_alike(Gemma3TextConfig(**shape, query_pre_attn_scalar=16))
    with pytest.raises(DataError, match="query_pre_attn_scalar = 256, and llama.cpp by 16 "
                                        ".*export --format hf"):
        check_llama_cpp_computes_alike(Gemma3TextConfig(**shape, query_pre_attn_scalar=256))
    # Gemma 2 27B's published shape: 46 layers, hidden 4608 / 32 heads = 144, head_dim 128
    check_llama_cpp_computes_alike(Gemma2Config(
        hidden_size=4608, num_attention_heads=32, head_dim=128, num_hidden_layers=46,
        query_pre_attn_scalar=144, num_key_value_heads=16, intermediate_size=64))
