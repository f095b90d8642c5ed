"""The Ollama Modelfile of every template family (ChatML, Llama 3, Gemma 3, Phi-3, Mistral
v0.1 and v0.3): its TEMPLATE, rendered with Ollama's rules by the Go-template renderer, gives
exactly the token ids training gave, with and without a system message, multi-turn, with the
generation prompt; ``ollama create`` runs with a fake ``ollama`` on PATH. The families'
templates come from ``chat_templates.py``; the tokenizer is SmolLM2's with the family's
special tokens added (the only real tokenizer offline)."""

from __future__ import annotations

import json
import logging
import re
import stat
from pathlib import Path

import pytest

from chat_templates import FAMILIES
from test_llm_sft import smol_tokenizer  # noqa: F401

CONVERSATIONS = [
    [{"role": "user", "content": "Is the coffee good?"}],
    [{"role": "system", "content": "Answer in one word."},
     {"role": "user", "content": "Is the coffee good?"}],
    [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "great"},
     {"role": "user", "content": "second, on\ntwo lines"}],
    [{"role": "system", "content": "Be brief.\nNo lists."},
     {"role": "user", "content": "one"}, {"role": "assistant", "content": "uno"},
     {"role": "user", "content": "two"}, {"role": "assistant", "content": "dos"},
     {"role": "user", "content": "café: ¿tres?"}],
]


def family_tokenizer(path: str, family: str):
    """SmolLM2's tokenizer with ``family``'s chat template, special tokens, BOS and EOS."""
    from transformers import AutoTokenizer

    spec = FAMILIES[family]
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.add_special_tokens({"additional_special_tokens": spec["special"]})
    if spec["bos"]:
        tokenizer.bos_token = spec["bos"]
    tokenizer.eos_token = spec["eos"]
    tokenizer.chat_template = spec["template"]
    return tokenizer


def parse_modelfile(text: str) -> dict:
    """TEMPLATE, SYSTEM and the stop parameters of a Modelfile, as ``ollama create`` reads
    them (triple-quoted values; one ``PARAMETER stop "…"`` line each)."""
    template = re.search(r'^TEMPLATE """(.*?)"""$', text, re.S | re.M)
    system = re.search(r'^SYSTEM """(.*?)"""$', text, re.S | re.M)
    return {"template": template.group(1), "system": system.group(1) if system else None,
            "stop": re.findall(r'^PARAMETER stop "(.*)"$', text, re.M)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_modelfile_renders_exactly_the_training_token_ids(family, smol_tokenizer):  # noqa: F811
    from entrena.exporting.modelfile import chat_structure, render_modelfile
    from entrena.exporting.ollama import ollama_prompt
    from entrena.tasks.llm_sft.chats import SftExample
    from entrena.tasks.llm_sft.tokens import tokenize_example

    tokenizer = family_tokenizer(smol_tokenizer, family)
    structure = chat_structure(tokenizer)
    # The runtime adds the BOS a template starts with (the GGUF's add_bos_token), as
    # llama.cpp's converter writes it for these families: the TEMPLATE leaves it out.
    add_bos = bool(FAMILIES[family]["bos"]) and structure.start.startswith(
        FAMILIES[family]["bos"])
    modelfile = parse_modelfile(render_modelfile(structure, stop=[tokenizer.eos_token],
                                                 add_bos=add_bos))
    assert FAMILIES[family]["eos"] in modelfile["stop"]  # the answer's end stops Ollama
    for messages in CONVERSATIONS:
        _, ids, prompt_tokens, _ = tokenize_example(
            tokenizer, SftExample(messages, "great", "t"), 512)
        text = ollama_prompt(modelfile["template"], messages, system=modelfile["system"])
        ollama_ids = ([tokenizer.bos_token_id] if add_bos else []) + tokenizer(
            text, add_special_tokens=False)["input_ids"]
        assert ollama_ids == [int(i) for i in ids[:prompt_tokens]], (family, messages, text)


def test_each_family_is_read_as_its_documented_structure(smol_tokenizer):  # noqa: F811
    from entrena.exporting.modelfile import chat_structure

    placements = {f: chat_structure(family_tokenizer(smol_tokenizer, f)).system_placement
                  for f in FAMILIES}
    assert placements == {"chatml": "turn", "llama3": "turn", "phi3": "turn",
                          "gemma3": "first_user", "mistral_v1": "first_user",
                          "mistral_v3": "last_user"}
    qwen = chat_structure(family_tokenizer(smol_tokenizer, "chatml"))
    assert qwen.default_system == ("You are Qwen, created by Alibaba Cloud. You are a helpful "
                                   "assistant.")
    llama = chat_structure(family_tokenizer(smol_tokenizer, "llama3"))
    assert llama.start == "<|begin_of_text|>" and llama.stop == ["<|eot_id|>"]
    assert "trims the white space" in llama.caveats[0]
    phi = chat_structure(family_tokenizer(smol_tokenizer, "phi3"))  # EOS after a bare chat
    assert phi.suffixes["user"] == "<|end|>\n" and phi.generation_prompt == "<|assistant|>\n"


def test_a_template_without_a_system_role_drops_system_messages(smol_tokenizer):  # noqa: F811
    from entrena.exporting.modelfile import chat_structure, ollama_template
    from entrena.exporting.ollama import ollama_prompt

    tokenizer = family_tokenizer(smol_tokenizer, "gemma3")
    tokenizer.chat_template = (  # Gemma 2's: a system message raises
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System "
        "role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] "
        "== 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
        "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{'<start_of_turn>model\n'}}{% endif %}")
    structure = chat_structure(tokenizer)
    assert structure.system_placement == "dropped"
    assert any("no system role" in c for c in structure.caveats)
    text = ollama_prompt(ollama_template(structure), CONVERSATIONS[1])
    assert text == "<bos><start_of_turn>user\nIs the coffee good?<end_of_turn>\n" \
                   "<start_of_turn>model\n"


def test_the_go_renderer_follows_go_and_ollama():
    from entrena.exporting.gotemplate import GoTemplateError, render_go_template
    from entrena.exporting.ollama import collate, ollama_prompt

    # Ollama's own Llama 3 template from its docs (trim markers, $.System, range).
    llama = ("{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}"
             "<|eot_id|>\n{{- end }}\n{{- range .Messages }}<|start_header_id|>{{ .Role }}"
             "<|end_header_id|>\n\n{{ .Content }}<|eot_id|>\n{{- end }}<|start_header_id|>"
             "assistant<|end_header_id|>\n\n")
    assert ollama_prompt(llama, [{"role": "user", "content": "Hi"}], system="S") == (
        "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>system"
        "<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    last = ("{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
            "{{ if $last }}[{{ .Content }}]{{ else if eq .Role \"user\" }}u{{ else }}a{{ end }}"
            "{{ end }}")
    assert render_go_template(last, {"Messages": [{"Role": "user", "Content": "x"},
                                                  {"Role": "assistant", "Content": "y"},
                                                  {"Role": "user", "Content": "z"}]}) == "ua[z]"
    assert render_go_template("{{ $n := 0 }}{{ range .L }}{{ $n = . }}{{ end }}{{ $n }}"
                              "{{ range .E }}x{{ else }} empty{{ end }}{{/* c */}}",
                              {"L": [1, 2, 3], "E": []}) == "3 empty"
    assert render_go_template("a  {{- .X -}}  b {{ and 0 1 }} {{ or 0 \"\" 2 }}{{ .Y }}",
                              {"X": "!"}) == "a!b 0 2<no value>"
    assert collate([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == (
        "", [type(collate([{"role": "user", "content": ""}])[1][0])("user", "a\n\nb")])
    with pytest.raises(GoTemplateError, match="outside the supported subset"):
        render_go_template("{{ .X | printf }}", {"X": 1})


def _fake_ollama(folder: Path, code: int = 0) -> Path:
    """An ``ollama`` script that records its arguments and working folder, then exits
    ``code``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ollama"
    record = folder / "calls.jsonl"
    script.write_text("#!/bin/sh\nprintf '{\"args\": \"%s\", \"cwd\": \"%s\"}\\n' \"$*\" "
                      f"\"$PWD\" >> {record}\necho 'transferring model data'\n"
                      f"{'echo Error: could not connect to ollama app >&2' if code else ''}\n"
                      f"exit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return record


def test_ollama_create_runs_in_the_bundle_when_ollama_is_on_path(tmp_path, monkeypatch, caplog):
    from entrena.exporting.ollama import add_bundle_to_ollama

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "Modelfile").write_text("FROM ./model.gguf\n")
    record = _fake_ollama(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    manifest = {"parity": {"passed": True}, "ollama": {"system": None}}
    with caplog.at_level(logging.INFO, logger="entrena"):
        add_bundle_to_ollama(bundle, "my-model:q8_0", manifest)
    call = json.loads(record.read_text())
    assert call == {"args": "create my-model:q8_0 -f Modelfile", "cwd": str(bundle)}
    written = json.loads((bundle / "export.json").read_text())
    assert written["ollama"]["created"] is True and written["ollama"]["system"] is None
    assert written["ollama"]["command"] == f"cd {bundle} && ollama create my-model:q8_0 -f " \
                                           "Modelfile"
    assert "ollama: created my-model:q8_0" in caplog.text


def test_without_ollama_on_path_it_says_the_command_to_run_later(tmp_path, monkeypatch, caplog):
    from entrena.exporting.ollama import create_in_ollama

    monkeypatch.setenv("PATH", str(tmp_path))  # no ollama here
    with caplog.at_level(logging.INFO, logger="entrena"):
        outcome = create_in_ollama(tmp_path, "mine")
    assert outcome == {"name": "mine", "created": False, "reason": "no ollama binary on PATH",
                       "command": f"cd {tmp_path} && ollama create mine -f Modelfile"}
    assert len(caplog.records) == 1 and "run: cd" in caplog.text


def test_a_failing_ollama_create_is_a_warning_with_its_message(tmp_path, monkeypatch, caplog):
    from entrena.exporting.ollama import create_in_ollama

    _fake_ollama(tmp_path / "bin", code=1)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with caplog.at_level(logging.INFO, logger="entrena"):
        outcome = create_in_ollama(tmp_path, "mine")
    assert outcome["created"] is False and outcome["returncode"] == 1
    assert "could not connect to ollama app" in caplog.text


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "onnx", "--ollama", "mine"], "Ollama runs GGUF files; add --format gguf"),
    (["--format", "gguf", "--ollama", "my model!"], "not a model name Ollama takes"),
])
def test_bad_ollama_options_exit_2_with_one_line(tmp_path, args, message):
    from typer.testing import CliRunner

    from entrena.cli import app

    done = CliRunner().invoke(app, ["export", str(tmp_path / "no-run"), *args])
    assert done.exit_code == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_template_that_cannot_be_mirrored_is_refused_naming_where(smol_tokenizer):  # noqa: F811
    from entrena.errors import DataError
    from entrena.exporting.modelfile import _turn_end, chat_structure

    assert _turn_end("<|end|>\n<|assistant|>\n", "<|end|>\n<|endoftext|>") == "<|end|>\n"
    assert _turn_end("[/INST] ", "[/INST]") == "[/INST]"
    tokenizer = family_tokenizer(smol_tokenizer, "chatml")
    tokenizer.chat_template = (  # numbers the turns: no fixed text per role
        "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ loop.index }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}")
    with pytest.raises(DataError, match=r"no Ollama TEMPLATE equal to it can be written") as got:
        chat_structure(tokenizer)
    assert "the derived TEMPLATE gives" in str(got.value) or "cannot be read" in str(got.value)
    assert "\n" not in str(got.value)
