"""``entrena export --format gguf`` of every decoder family llama.cpp converts, through its own
converter: a tiny random model of each family (tests/llm_families.py: its own chat template,
stop token and, for Gemma 2 and Phi-3, a sentencepiece tokenizer) is fully fine-tuned a few
steps at a high learning rate (so its greedy answers are stable), exported to q8_0 and
checked in two steps (PyTorch → f16 → q8_0, each >= 95% agreement); the file carries the
family's architecture, chat template and turn-end token as end of generation. Qwen2's folder
(SmolLM2's vocabulary read by ``Qwen2Tokenizer``: a pre-tokenizer no model ships) is refused
with the hash and the fix, nothing written.

Llama 3 and Phi-3 (fused projections, sentencepiece, llama.cpp's name rule) run by default;
all families in the slow suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llm_families import FAMILIES, family_folder
from test_llm_export import invoke
from test_llm_sft import chats, smol_tokenizer, write_jsonl  # noqa: F401 (a fixture)

RUNTIME_REASON = "the gguf extra (llama-cpp-python) is installed by make install-llm"
CONVERTED = [f for f in FAMILIES if f != "qwen2"]
DEFAULT = ("llama", "phi3")


def _trained(tmp: Path, family: str, tokenizer: str, epochs: int = 6) -> Path:
    """A full fine-tune of the family's tiny folder on great/other reviews; the run folder."""
    import entrena

    if FAMILIES[family].sentencepiece:
        pytest.importorskip("sentencepiece")
    folder = family_folder(family, tmp / "models", tokenizer)
    write_jsonl(tmp / "train.jsonl", chats(40))
    write_jsonl(tmp / "test.jsonl", chats(12, start=100))
    cfg = {"name": f"tiny-{family}", "task": "llm-sft",
           "data": {"train": str(tmp / "train.jsonl"), "test": str(tmp / "test.jsonl"),
                    "validation_fraction": 0.25},
           "model": {"name": str(folder), "max_length": 64, "finetuning": "full"},
           "train": {"max_epochs": epochs, "batch_size": 4, "learning_rate": 3e-2,
                     "evals_per_epoch": 1, "num_threads": 1},
           "tracking": {"enabled": False}}
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:  # report.html (matplotlib): not tested here
        patch.setattr("entrena.recipes.training.write_report", lambda paths: None)
        entrena.train(tmp / "config.yaml", run_dir=tmp / "run")
    return tmp / "run"


@pytest.mark.parametrize("family", [
    pytest.param(f, marks=() if f in DEFAULT else pytest.mark.slow) for f in CONVERTED])
def test_each_family_exports_to_gguf_and_answers_as_pytorch(family, tmp_path,
                                                             smol_tokenizer):  # noqa: F811
    pytest.importorskip("llama_cpp", reason=RUNTIME_REASON)
    from entrena.exporting.gguf_reader import read_gguf_header

    run_dir = _trained(tmp_path, family, smol_tokenizer)
    done = invoke("export", run_dir, "--format", "gguf", "--quantize", "q8_0",
                  "--parity-prompts", "12", "--threads", "1", "--json")
    assert done.exit_code == 0, (done.stderr[-2000:], done.exception)
    report = json.loads(done.stdout)
    steps = report["parity"]["steps"]
    assert [(s["from"], s["to"]) for s in steps] == [("pytorch", "f16"), ("f16", "q8_0")]
    assert all(s["agreement"] >= 0.95 for s in steps), steps
    assert report["parity"]["passed"] and report["parity"]["tokenizer_agreement"] == 1.0
    fields = read_gguf_header(Path(report["bundle"]) / "model.gguf").fields
    stop = FAMILIES[family].stop
    assert report["stop_tokens"] == [stop]
    assert report["gguf"]["architecture"] == fields["general.architecture"].value
    assert fields["tokenizer.chat_template"].value == report["chat_template"]
    tokens = fields["tokenizer.ggml.tokens"].value
    ends = {fields[k].value for k in ("tokenizer.ggml.eos_token_id",
                                      "tokenizer.ggml.eot_token_id") if k in fields}
    assert stop in {tokens[i] for i in ends}
    modelfile = (Path(report["bundle"]) / "Modelfile").read_text(encoding="utf-8")
    assert f'PARAMETER stop "{stop}"' in modelfile


def test_a_pre_tokenizer_llama_cpp_does_not_know_exits_2_naming_it(tmp_path,
                                                                    smol_tokenizer):  # noqa: F811
    pytest.importorskip("llama_cpp", reason=RUNTIME_REASON)
    run_dir = _trained(tmp_path, "qwen2", smol_tokenizer, epochs=1)
    done = invoke("export", run_dir, "--format", "gguf", "--output", tmp_path / "b")
    assert done.exit_code == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "does not know this tokenizer's pre-tokenizer (hash " in lines[0]
    assert "never forces a fallback" in lines[0]
    assert not (tmp_path / "b").exists()
    assert not list(tmp_path.glob(".b*"))
