"""``entrena export --format gguf|hf`` of ``task: llm-sft``: the GGUF file of a tiny random
Llama (SmolLM2's tokenizer) loads in llama.cpp in a fresh process and answers as PyTorch
does; the Modelfile's TEMPLATE renders the training tokens; predict and chat run the bundle;
bad input exits 2 with one line. The real SmolLM2 q8_0 parity is in the slow suite."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from test_llm_sft import chats, config, smol_tokenizer, write_jsonl  # noqa: F401

llama_cpp = pytest.importorskip("llama_cpp", reason="the gguf extra (llama-cpp-python) is "
                                "installed by make install")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, smol_tokenizer):  # noqa: F811
    """A tiny full fine-tune (as test_llm_sft's CLI run), exported to GGUF f16 and to hf."""
    import entrena

    work = tmp_path_factory.mktemp("llm-export")
    write_jsonl(work / "train.jsonl", chats(40))
    write_jsonl(work / "test.jsonl", chats(12, start=100))
    cfg = config(work, smol_tokenizer, data={"test": str(work / "test.jsonl")},
                 model={"finetuning": "full"},
                 train={"max_epochs": 6, "learning_rate": 3e-2, "evals_per_epoch": 1})
    (work / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    run_dir = work / "run"
    entrena.train(work / "config.yaml", run_dir=run_dir)
    gguf = entrena.export(run_dir, format="gguf", quantize="f16", parity_prompts=12)
    hf = entrena.export(run_dir, format="hf", parity_prompts=12)
    return work, run_dir, gguf, hf


def _training_prompts(run_dir: Path, rows: list[dict]) -> tuple[list[str], list[list[int]]]:
    from entrena.tasks.llm_sft.chats import SftExample
    from entrena.tasks.llm_sft.model import build_tokenizer
    from entrena.tasks.llm_sft.tokens import tokenize_example

    tokenizer = build_tokenizer(str(run_dir / "model"))
    texts, ids = [], []
    for row in rows:
        text, tokens, length, _ = tokenize_example(
            tokenizer, SftExample(row["messages"][:-1], row["messages"][-1]["content"], "t"), 64)
        texts.append(text)
        ids.append([int(t) for t in tokens[:length]])
    return texts, ids


def test_the_bundle_holds_gguf_modelfile_and_parity_figures(exported):
    _, run_dir, gguf, _ = exported
    bundle = run_dir / "export" / "gguf-f16"
    assert gguf.bundle_dir == bundle and gguf.passed
    for name in ("model.gguf", "Modelfile", "export.json", "MODEL_CARD.md",
                 "entrena_model.json", "tokenizer.json"):
        assert (bundle / name).is_file(), name
    report = json.loads((bundle / "export.json").read_text())
    parity = report["parity"]
    assert parity["prompts"] == 12 and 0.0 <= parity["agreement"] <= 1.0
    assert parity["agreement"] >= 0.95 and parity["tokenizer_agreement"] == 1.0
    assert {"exact_match_pytorch", "exact_match_gguf"} <= set(parity)
    assert report["quantization"]["tensor_types"]["F16"] > 0
    assert report["stop_tokens"] == ["<|im_end|>"]
    assert report["size_bytes"]["model_file"] == (bundle / "model.gguf").stat().st_size


def test_the_gguf_answers_as_pytorch_in_a_fresh_llama_cpp_process(exported):
    """Write → load in llama-cpp-python in another process → the same greedy tokens; the
    file's metadata names the training chat template and the EOS."""
    import torch

    from entrena.tasks.llm_sft.model import greedy_generate, load_sft_model

    _, run_dir, gguf, _ = exported
    rows = chats(8, start=300)
    texts, ids = _training_prompts(run_dir, rows)
    model, tokenizer, _ = load_sft_model(run_dir / "model")
    expected = [[int(t) for t in greedy_generate(
        model.lm, [torch.tensor(p)], max_new_tokens=4, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id)[0].tolist() if t >= 0] for p in ids]
    script = """
import json, sys
from llama_cpp import Llama
path, texts = sys.argv[1], json.loads(sys.stdin.read())
llm = Llama(model_path=path, n_ctx=256, verbose=False)
out = {"meta": {k: llm.metadata.get(k) for k in ("tokenizer.chat_template",
       "tokenizer.ggml.eos_token_id", "general.architecture")}, "eos": llm.token_eos(),
       "prompts": [], "answers": []}
for text in texts:
    ids = llm.tokenize(text.encode(), add_bos=False, special=True)
    answer = []
    for token in llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
        answer.append(int(token))
        if token == llm.token_eos() or len(answer) >= 4:
            break
    out["prompts"].append(ids)
    out["answers"].append(answer)
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script, str(gguf.bundle_dir / "model.gguf")],
                          input=json.dumps(texts), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["meta"]["tokenizer.chat_template"] == tokenizer.chat_template
    assert int(got["meta"]["tokenizer.ggml.eos_token_id"]) == tokenizer.eos_token_id
    assert got["eos"] == tokenizer.eos_token_id
    assert got["prompts"] == ids
    assert got["answers"] == expected


def _render_go_template(template: str, messages: list[dict]) -> str:
    """The subset of Go's text/template the Modelfile uses: ``{{ range .Messages }}`` …
    ``{{ end }}`` with ``{{ .Role }}`` / ``{{ .Content }}``; anything else fails the test."""
    head, body, tail = re.fullmatch(r"(.*?)\{\{ range \.Messages \}\}(.*?)\{\{ end \}\}(.*)",
                                    template, re.S).groups()
    assert "{{" not in head + tail
    turns = []
    for message in messages:
        turn = body.replace("{{ .Role }}", message["role"]).replace("{{ .Content }}",
                                                                   message["content"])
        assert "{{" not in turn
        turns.append(turn)
    return head + "".join(turns) + tail


def test_the_modelfile_template_renders_exactly_the_training_tokens(exported):
    from entrena.tasks.llm_sft.model import build_tokenizer

    _, run_dir, gguf, _ = exported
    text = (gguf.bundle_dir / "Modelfile").read_text()
    assert text.startswith("FROM ./model.gguf\n")
    assert 'PARAMETER stop "<|im_end|>"' in text
    template = re.search(r'TEMPLATE """(.*?)"""', text, re.S).group(1)
    system = re.search(r'SYSTEM """(.*?)"""', text, re.S).group(1)
    tokenizer = build_tokenizer(str(run_dir / "model"))
    rows = chats(3, start=500) + [{"messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "great"},
        {"role": "user", "content": "second"}, {"role": "assistant", "content": "other"}]}]
    texts, ids = _training_prompts(run_dir, rows)
    for row, expected in zip(rows, ids, strict=True):
        messages = row["messages"][:-1]
        if messages[0]["role"] != "system":  # Ollama puts the Modelfile's SYSTEM first
            messages = [{"role": "system", "content": system}, *messages]
        rendered = _render_go_template(template, messages)
        assert tokenizer(rendered, add_special_tokens=False)["input_ids"] == expected


def test_the_hf_bundle_is_the_merged_model_and_agrees(exported):
    _, run_dir, _, hf = exported
    assert hf.bundle_dir == run_dir / "export" / "hf" and hf.passed
    assert (hf.bundle_dir / "model.safetensors").is_file()
    assert hf.report["parity"]["agreement"] == 1.0


@pytest.mark.slow  # 110 s on the busy 2-core machine: two CLI processes load torch and llama.cpp
def test_predict_and_chat_run_the_gguf_bundle(exported):
    work, _, gguf, _ = exported
    write_jsonl(work / "prompts.jsonl", [
        {"messages": r["messages"][:1], "id": n} for n, r in enumerate(chats(4, start=200))])
    predicted = run_cli("predict", gguf.bundle_dir, "--input", "prompts.jsonl", "--output",
                        "out.jsonl", "--json", cwd=work)
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    assert json.loads(predicted.stdout)["backend"] == "llama.cpp"
    rows = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(4))
    assert all(r["generated_text"] in ("great", "other") for r in rows)
    talk = subprocess.run(
        [sys.executable, "-m", "entrena.cli", "chat", str(gguf.bundle_dir), "--max-new-tokens",
         "4"], input="Review: the coffee was tasty (7). Great or other?\n/exit\n",
        capture_output=True, text=True, timeout=120, cwd=work, check=False)
    assert talk.returncode == 0, talk.stderr[-2000:]
    assert re.fullmatch(r"model> (great|other)\n", talk.stdout)


# --- bad input: one line, exit 2 -------------------------------------------------------------

def test_an_unknown_quantisation_names_the_choices(exported):
    work, run_dir, _, _ = exported
    done = run_cli("export", run_dir, "--format", "gguf", "--quantize", "q4_k", cwd=work)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --quantize 'q4_k' is not a quantisation of --format gguf; use one of: f16, "
        "q8_0, q4_k_m (did you mean 'q4_k_m'?)"]


def test_gguf_export_of_a_classifier_run_is_refused(tmp_path):
    run_dir = tmp_path / "classifier"
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("task: text-classification\n", encoding="utf-8")
    (run_dir / "status.json").write_text('{"status": "finished"}', encoding="utf-8")
    from entrena.tasks.registry import model_files

    for name in model_files("text-classification"):
        (run_dir / "model" / name).write_text("{}", encoding="utf-8")
    done = run_cli("export", run_dir, "--format", "gguf", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --format gguf: a text-classification model exports to onnx or torchscript "
        "only; use --format onnx"]


def test_a_missing_runtime_names_what_to_install(exported, tmp_path):
    work, run_dir, gguf, _ = exported
    shim = tmp_path / "shim" / "llama_cpp"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named llama_cpp')\n")
    for args in (("export", run_dir, "--format", "gguf", "--output", tmp_path / "b"),
                 ("predict", gguf.bundle_dir, "--input", work / "test.jsonl", "--output",
                  tmp_path / "o.jsonl")):
        done = run_cli(*args, cwd=work, PYTHONPATH=os.pathsep.join(
            [str(shim.parent), os.environ.get("PYTHONPATH", "")]))
        assert done.returncode == 2, done.stderr[-2000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "llama-cpp-python" in errors[0]
        assert "pip install 'entrena[gguf]'" in errors[0]
    assert not (tmp_path / "b").exists() and not (tmp_path / "o.jsonl").exists()
