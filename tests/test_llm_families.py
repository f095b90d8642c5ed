"""``task: llm-sft`` on every decoder family llama.cpp converts (Llama 3, Qwen2/2.5, Qwen3,
Mistral, Gemma 2, Gemma 3 text, Phi-3, SmolLM), each a tiny random model in a local folder
with its own chat template (tests/llm_families.py): the stop token is the template's turn
end, the loss is the model's own (Gemma 2's soft-capped logits), shared prefixes and packing
change nothing, LoRA adapts the family's projections (Phi-3's fused ones) as the planner
counts them, LoRA and full fine-tuning train from the folder, a SIGKILLed run resumes
exactly, and folders that are not chat-ready causal LMs are refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from conftest import run_cli
from entrena.errors import ConfigError
from llm_families import FAMILIES, family_folder
from test_llm_sft import chats, smol_tokenizer, write_jsonl  # noqa: F401 (a fixture)

LORA = {"r": 4, "alpha": 8}


@pytest.fixture(scope="module")
def families(tmp_path_factory, smol_tokenizer):  # noqa: F811 (the fixture)
    """``folder(family)``: the family's tiny model folder, built once per module."""
    directory = tmp_path_factory.mktemp("families")

    def folder(family: str) -> Path:
        if FAMILIES[family].sentencepiece:
            pytest.importorskip("sentencepiece")
        return family_folder(family, directory, smol_tokenizer)

    return folder


def family_config(tmp: Path, folder: Path, **sections) -> dict:
    """test_llm_sft.config's run, on a pretrained folder instead of model.architecture."""
    cfg = {"name": "family", "task": "llm-sft",
           "data": {"train": str(tmp / "train.jsonl"), "validation_fraction": 0.25},
           "model": {"name": str(folder), "max_length": 64, "lora": dict(LORA)},
           "train": {"max_epochs": 1, "batch_size": 4, "learning_rate": 1e-2,
                     "num_threads": 1},
           "tracking": {"enabled": False}}
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def _prepared(tmp: Path, folder: Path, **sections):
    from entrena.tasks.registry import get_task, load_config

    write_jsonl(tmp / "train.jsonl", chats(8))
    loaded = load_config(family_config(tmp, folder, **sections))
    task = get_task("llm-sft")
    sources = task.model_sources(loaded)
    return loaded, task, sources, task.prepare(loaded, sources)


# --- chat template and stop token -----------------------------------------------------------

@pytest.mark.parametrize("family", list(FAMILIES))
def test_responses_end_with_the_token_that_ends_a_turn_in_the_template(family, families,
                                                                       tmp_path):
    """Llama 3's <|eot_id|>, Gemma's <end_of_turn> and Phi-3's <|end|> differ from the EOS
    their tokenizers name; the response is learned up to the template's turn end, the
    evaluation stops there, and the saved tokenizer names it as EOS (what exports read)."""
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    folder = families(family)
    stop = FAMILIES[family].stop
    tokenizer = build_tokenizer(str(folder))
    assert tokenizer.eos_token == stop
    stop_id = tokenizer.convert_tokens_to_ids(stop)
    _, _, _, prepared = _prepared(tmp_path, folder)
    split = prepared.splits.train
    for ids, prompt in zip(split.input_ids, split.prompt_lengths, strict=True):
        assert ids[-1] == stop_id
        response = tokenizer.decode(ids[prompt:-1]).strip()
        assert response in ("great", "other")
    assert prepared.report["encoding"]["eos_token"] == stop


@pytest.mark.parametrize("family, bos", [("gemma2", True), ("phi3", False), ("llama", False)])
def test_a_saved_tokenizer_keeps_what_llama_cpps_converter_reads(family, bos, families,
                                                                 tmp_path):
    """transformers 5 drops tokenizer.model, added_tokens_decoder and add_bos_token; the
    converter reads the vocabulary of Gemma 2 and Phi-3 from the first, types control
    tokens from the second and defaults to adding a BOS without the third."""
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer, save_tokenizer

    folder = families(family)
    save_tokenizer(build_tokenizer(str(folder)), tmp_path / "saved")
    assert (tmp_path / "saved" / "tokenizer.model").is_file() == (
        bool(FAMILIES[family].sentencepiece))
    settings = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert settings["eos_token"] == FAMILIES[family].stop
    assert settings["add_bos_token"] is bos
    special = {t["content"] for t in settings["added_tokens_decoder"].values() if t["special"]}
    assert FAMILIES[family].stop in special


# --- the model: loss, shared prefix, LoRA targets, planner shape -----------------------------

def _batch(tokenizer, n: int = 3):
    """Prompts of different lengths that share the template's opening, responses after."""
    from entrena.tasks.llm_sft.chats import SftExample
    from entrena.tasks.llm_sft.tokens import tokenize_example

    rows = []
    for i, chat in enumerate(chats(n)):
        example = SftExample(messages=chat["messages"][:1],
                             response=chat["messages"][1]["content"], row={}, where=f"#{i}")
        _, ids, prompt, _ = tokenize_example(tokenizer, example, 64)
        rows.append((ids, prompt))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((n, width), 0, dtype=torch.long)
    mask, target = torch.zeros_like(input_ids), torch.zeros_like(input_ids)
    for row, (ids, prompt) in enumerate(rows):
        input_ids[row, :len(ids)] = torch.from_numpy(ids)
        mask[row, :len(ids)] = 1
        target[row, prompt:len(ids)] = 1
    return input_ids, mask, target


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_loss_is_the_models_own_and_a_shared_prefix_changes_nothing(family, families):
    """The loss from the head at the target positions equals the NLL of the model's own
    logits (Gemma 2 soft-caps them at 30), with and without the shared prefix decoded
    once (sliding-window and q/k-norm layers included)."""
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    folder = families(family)
    tokenizer = build_tokenizer(str(folder))
    input_ids, mask, target = _batch(tokenizer)
    outputs = {}
    for share in (False, True):
        torch.manual_seed(0)
        model = build_sft_model(pretrained=str(folder), architecture=None,
                                tokenizer=tokenizer, finetuning="lora", lora=dict(
                                    LORA, dropout=0.0, target_modules="all-linear"),
                                dropout=0.0, max_new_tokens=2, gradient_checkpointing=False,
                                shared_prefix=share)
        outputs[share] = model(input_ids, mask, target)
    torch.testing.assert_close(outputs[True], outputs[False], rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        logits = model.causal_lm(input_ids=input_ids, attention_mask=mask).logits
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 1:],
                                            reduction="none")
    expected = (nll * target[:, 1:]).sum(1)
    torch.testing.assert_close(outputs[False][:, 0].detach(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_lora_adapts_the_familys_projections_as_the_planner_counts_them(family, families):
    """``all-linear`` is q/k/v/o/gate/up/down, or Phi-3's fused qkv_proj and gate_up_proj;
    the planner's shape from config.json counts the same adapter parameters and (within the
    norms it leaves out) the same weights: tied heads, head_dim, gated MLPs per family."""
    from entrena.planning.llm import load_llm_shape
    from entrena.tasks.llm_sft.model import build_language_model, build_sft_model, projection_names
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    folder = families(family)
    spec = FAMILIES[family]
    tokenizer = build_tokenizer(str(folder))
    base = build_language_model(pretrained=str(folder), architecture=None, tokenizer=tokenizer)
    assert tuple(projection_names(base)) == spec.lora_targets
    model = build_sft_model(pretrained=str(folder), architecture=None, tokenizer=tokenizer,
                            finetuning="lora", lora=dict(LORA, dropout=0.0,
                                                         target_modules="all-linear"),
                            dropout=0.0, max_new_tokens=2, gradient_checkpointing=False)
    shape = load_llm_shape(folder)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert shape.lora_parameters(LORA["r"]) == trained
    base = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    assert shape.tied_embeddings == spec.tied
    assert abs(shape.parameters - base) / base < 0.01, (shape.parameters, base)
    targeted = ["qkv_proj"] if shape.fused_projections else ["q_proj", "v_proj"]
    assert shape.lora_parameters(4, tuple(targeted)) > 0
    wrong = ["q_proj"] if shape.fused_projections else ["qkv_proj"]
    with pytest.raises(ConfigError, match="use all-linear or names from"):
        shape.lora_parameters(4, tuple(wrong))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_packed_batch_gives_the_familys_padded_loss_and_gradients(family, families,
                                                                     tmp_path):
    """Packed rows (restarting positions, no padding mask) give each example its padded
    loss and gradients: transformers builds the block-diagonal mask for every family's
    attention layers, sliding-window ones included."""
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.registry import get_task, load_config
    from test_llm_packing import _mixed_lengths

    def loss_and_grads(batch):
        model.zero_grad()
        out = model(**{k: v for k, v in batch.items() if k != "labels"})
        loss = out[:, 0].sum() / out[:, 1].sum()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                               if p.requires_grad}

    write_jsonl(tmp_path / "train.jsonl", _mixed_lengths(12))
    loaded = load_config(family_config(tmp_path, families(family), data={
        "packing": True, "validation_fraction": 0.2}, model={"max_length": 160}))
    task = get_task("llm-sft")
    prepared = task.prepare(loaded, task.model_sources(loaded))
    source = task.batches(loaded, prepared, "train", batch_size=6, shuffle=True)
    indices = source.plan(0)[0]
    packed = source.collate(indices)
    source.pack = False
    padded = source.collate(indices)
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0]  # rows were combined
    torch.manual_seed(0)
    model = build_sft_model(pretrained=str(families(family)), architecture=None,
                            tokenizer=prepared.tokenizer, finetuning="lora",
                            lora=dict(LORA, dropout=0.0, target_modules="all-linear"),
                            dropout=0.0, max_new_tokens=2, gradient_checkpointing=False)
    model.lm.base_model.model.requires_grad_(True)  # every weight's gradient compared
    loss_packed, grads_packed = loss_and_grads(packed)
    loss_padded, grads_padded = loss_and_grads(padded)
    torch.testing.assert_close(loss_packed, loss_padded, rtol=1e-5, atol=1e-5)
    for name, grad in grads_padded.items():
        torch.testing.assert_close(grads_packed[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_multimodal_gemma3_adapts_its_text_decoder_only(families, tmp_path):
    """Gemma 3 4B+ folders hold a vision tower beside the text decoder
    (``Gemma3ForConditionalGeneration``): LoRA adapts the text decoder's projections only
    (PEFT's own all-linear would adapt the tower too), as the planner counts them, also with
    ``model.lora.layers``, and the loss is the model's own."""
    from transformers import AutoModelForCausalLM, Gemma3Config

    from entrena.planning.llm import load_llm_shape
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(str(families("gemma3_text")))
    config = Gemma3Config(
        text_config=dict(FAMILIES["gemma3_text"].config, hidden_size=64,
                         intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(tokenizer)),
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
        mm_tokens_per_image=4)
    torch.manual_seed(0)
    folder = tmp_path / "gemma3"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    shape = load_llm_shape(folder)
    input_ids, mask, target = _batch(tokenizer)
    for layers in (None, 1):
        model = build_sft_model(pretrained=str(folder), architecture=None,
                                tokenizer=tokenizer, finetuning="lora", lora=dict(
                                    LORA, dropout=0.0, target_modules="all-linear",
                                    layers=layers),
                                dropout=0.0, max_new_tokens=2, gradient_checkpointing=False)
        adapted = [n for n, p in model.named_parameters() if p.requires_grad]
        assert adapted and all(".language_model.layers." in n for n in adapted)
        assert sum(p.numel() for n, p in model.named_parameters() if p.requires_grad) == \
            shape.lora_parameters(LORA["r"]) * (layers or shape.layers) // shape.layers
    out = model(input_ids, mask, target)
    with torch.no_grad():
        logits = model.causal_lm(input_ids=input_ids, attention_mask=mask).logits
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 1:],
                                            reduction="none")
    torch.testing.assert_close(out[:, 0].detach(), (nll * target[:, 1:]).sum(1), rtol=1e-4,
                               atol=1e-4)


def test_gemma2_runs_the_unfused_attention_and_refuses_sdpa(families):
    """Gemma 2 soft-caps its attention scores, which PyTorch's fused kernel cannot: ``auto``
    runs transformers' eager attention, ``sdpa`` is refused with the reason."""
    from transformers import AutoModelForCausalLM

    from entrena.engine.attention import apply_attention

    model = AutoModelForCausalLM.from_pretrained(families("gemma2"))
    note = apply_attention(model, "auto", device="cpu", precision="32-true", batch_size=4,
                           max_length=64, threads=1, cache_dir=None)
    assert "eager" in note and model.config._attn_implementation == "eager"
    with pytest.raises(ConfigError, match="attn_logit_softcapping = 50.0.*use auto or eager"):
        apply_attention(model, "sdpa", device="cpu", precision="32-true", batch_size=4,
                        max_length=64, threads=1, cache_dir=None)


# --- training from the folder ---------------------------------------------------------------

@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_trains_with_lora_from_its_folder(family, families, tmp_path):
    """A few LoRA steps on packed batches: the adapters train on the family's projections,
    the saved folder keeps the family's template with the turn end as EOS."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    import entrena

    folder = families(family)
    write_jsonl(tmp_path / "train.jsonl", chats(16))
    cfg = family_config(tmp_path, folder, data={"packing": True},
                        train={"max_steps": 3, "evals_per_epoch": 1})
    result = entrena.train(cfg, run_dir=tmp_path / "run")
    assert result.metrics["validation"]["loss"] > 0
    adapter = load_file(str(result.run_dir / "model" / "adapter" / "adapter_model.safetensors"))
    adapted = {key.split(".lora_")[0].rsplit(".", 1)[-1] for key in adapter}
    assert adapted == set(FAMILIES[family].lora_targets)
    assert any(bool(v.abs().sum()) for k, v in adapter.items() if "lora_B" in k)  # it trained
    saved = AutoTokenizer.from_pretrained(result.run_dir / "model")
    assert saved.eos_token == FAMILIES[family].stop
    original = AutoTokenizer.from_pretrained(folder)
    assert saved.chat_template == original.chat_template
    meta = json.loads((result.run_dir / "model" / "entrena_model.json").read_text())
    assert Path(meta["base_model"]) == folder.resolve()
    plan = json.loads((result.run_dir / "plan.json").read_text())
    assert plan["llm"]["memory"]["trainable_parameters"] == sum(
        v.numel() for v in adapter.values())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_full_finetuning_trains_every_weight_of_the_family(family, families, tmp_path):
    from safetensors.torch import load_file

    import entrena

    folder = families(family)
    write_jsonl(tmp_path / "train.jsonl", chats(12))
    cfg = family_config(tmp_path, folder, model={"finetuning": "full"},
                        train={"max_steps": 2, "learning_rate": 1e-3})
    result = entrena.train(cfg, run_dir=tmp_path / "run")
    trained = load_file(str(result.run_dir / "model" / "model.safetensors"))
    before = load_file(str(folder / "model.safetensors"))
    changed = [k for k in before if k in trained and not torch.equal(before[k], trained[k])]
    assert len(changed) >= len(before) // 2


def test_a_crashed_gemma2_run_resumes_to_the_same_adapter_weights(families, tmp_path):
    """Gemma 2 (eager soft-capped attention, capped logits, sliding windows) crashed after
    step 3 resumes from its step-2 checkpoint to the weights of the run that never
    stopped."""
    import entrena
    from test_llm_sft import _adapter, _Crash

    write_jsonl(tmp_path / "train.jsonl", chats(24))
    cfg = family_config(tmp_path, families("gemma2"), model={"lora": dict(LORA, dropout=0.1)},
                        train={"max_epochs": 2, "gradient_accumulation_steps": 2,
                               "checkpoint": {"every_steps": 2}})
    entrena.train(cfg, run_dir=tmp_path / "straight")
    with pytest.raises(RuntimeError, match="simulated crash"):
        entrena.train(cfg, run_dir=tmp_path / "crashed", callbacks=[_Crash(at=3)])
    resumed = entrena.train(cfg, run_dir=tmp_path / "crashed")
    assert resumed.resumed_from_step == 2
    straight, again = _adapter(tmp_path / "straight"), _adapter(tmp_path / "crashed")
    assert straight.keys() == again.keys()
    for key in straight:
        assert torch.equal(straight[key], again[key]), key


@pytest.mark.slow
def test_a_sigkilled_gemma3_run_resumes_to_the_same_adapter_weights(families, tmp_path):
    """Gemma 3 (sliding-window layers, q/k norms, a turn end that is not its EOS): the
    process killed with SIGKILL after a checkpoint, then the same command."""
    import signal
    import subprocess
    import time

    from safetensors.torch import load_file

    from conftest import clean_env, entrena_command

    folder = families("gemma3_text")
    write_jsonl(tmp_path / "train.jsonl", chats(32))
    cfg = family_config(tmp_path, folder, model={"lora": dict(LORA, dropout=0.1)},
                        train={"max_epochs": 3, "checkpoint": {"every_steps": 2},
                               "log_every_steps": 1})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert run_cli("train", "config.yaml", "--run-dir", "straight", cwd=tmp_path).returncode == 0
    process = subprocess.Popen([*entrena_command(), "train", "config.yaml", "--run-dir",
                                "killed"], cwd=tmp_path, env=clean_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if len(list(checkpoints.glob("step-*.pt"))) >= 2:  # mid-run, past two saves
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = run_cli("train", "config.yaml", "--run-dir", "killed", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from step" in resumed.stderr
    path = Path("model") / "adapter" / "adapter_model.safetensors"
    straight = load_file(str(tmp_path / "straight" / path))
    again = load_file(str(tmp_path / "killed" / path))
    assert straight.keys() == again.keys()
    for key in straight:
        assert torch.equal(straight[key], again[key]), key


# --- bad input: one line, exit 2 ------------------------------------------------------------

def _save(model, folder: Path) -> Path:
    model.save_pretrained(folder)
    return folder


def _bert_folder(directory: Path) -> Path:
    from transformers import BertConfig, BertForMaskedLM

    return _save(BertForMaskedLM(BertConfig(vocab_size=100, hidden_size=32,
                                            num_hidden_layers=1, num_attention_heads=2,
                                            intermediate_size=64)), directory / "bert")


def _t5_folder(directory: Path) -> Path:
    from transformers import T5Config, T5ForConditionalGeneration

    return _save(T5ForConditionalGeneration(T5Config(vocab_size=100, d_model=32, d_kv=8,
                                                     d_ff=64, num_layers=1, num_heads=2)),
                 directory / "t5")


@pytest.mark.parametrize("case, message", [
    ("bert", "BertForMaskedLM \\(model_type bert\\), not a causal language model; task: "
             "llm-sft trains decoder-only causal language models"),
    ("t5", "holds an encoder-decoder model, T5ForConditionalGeneration"),
    ("no_template", "has no chat template.*set data.chat_template"),
    ("no_weights", "has a config.json but no weights .*an interrupted download or copy"),
])
def test_a_folder_that_is_not_a_chat_ready_causal_lm_exits_2_with_one_line(
        case, message, families, tmp_path):
    import re
    import shutil

    if case == "bert":
        folder = _bert_folder(tmp_path)
    elif case == "t5":
        folder = _t5_folder(tmp_path)
    elif case == "no_weights":  # a download cut short: config and tokenizer, no weights
        folder = tmp_path / "partial-llama"
        shutil.copytree(families("llama"), folder)
        for weights in folder.glob("*.safetensors"):
            weights.unlink()
    else:
        folder = tmp_path / "base-llama"
        shutil.copytree(families("llama"), folder)
        (folder / "chat_template.jinja").unlink()
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings.pop("chat_template", None)
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    write_jsonl(tmp_path / "train.jsonl", chats(8))
    cfg = family_config(tmp_path, folder)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", "--run-dir", "run", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and re.search(message, lines[0]), result.stderr[-2000:]
    assert not (tmp_path / "run" / "model").exists()


def test_a_conversation_the_template_refuses_is_named_with_its_line(families, tmp_path):
    """Mistral's template raises on a system turn: the row is named, not an internal
    error."""
    from entrena.errors import DataError
    from entrena.tasks.registry import get_task, load_config

    rows = chats(8)
    rows[2]["messages"].insert(0, {"role": "system", "content": "Answer in one word."})
    write_jsonl(tmp_path / "train.jsonl", rows)

    loaded = load_config(family_config(tmp_path, families("mistral")))
    task = get_task("llm-sft")
    with pytest.raises(DataError, match=r"train.jsonl: line 3: the model's chat template refuses "
                                        r"this conversation \(system/user\): Conversation "
                                        r"roles must alternate"):
        task.prepare(loaded, task.model_sources(loaded))


def test_a_base_model_takes_the_chat_template_of_the_config(families, tmp_path):
    """A tokenizer without a template trains with ``data.chat_template`` (a .jinja file),
    whose turn end becomes the stop token; a template that does not render is refused."""
    import shutil

    from llm_families import GEMMA_TEMPLATE

    folder = tmp_path / "base-llama"
    shutil.copytree(families("llama"), folder)
    (folder / "chat_template.jinja").unlink()
    (tmp_path / "gemma.jinja").write_text(GEMMA_TEMPLATE, encoding="utf-8")
    with pytest.raises(ConfigError, match="data.chat_template: the template does not render"):
        _prepared(tmp_path, folder, data={"chat_template": "{% for m in messages %}"})
    # Gemma's turn markers are plain text to a Llama 3 vocabulary: no special token ends the
    # answer, so the tokenizer's EOS does
    template_file = str(tmp_path / "gemma.jinja")
    _, _, _, prepared = _prepared(tmp_path, folder, data={"chat_template": template_file})
    assert prepared.tokenizer.eos_token == "<|end_of_text|>"
    assert prepared.tokenizer.chat_template == GEMMA_TEMPLATE
    llama = FAMILIES["llama"].template
    _, _, _, prepared = _prepared(tmp_path, folder, data={"chat_template": llama})
    assert prepared.tokenizer.eos_token == "<|eot_id|>"


def test_a_max_length_past_the_models_context_is_warned_about(families, tmp_path, caplog):
    """The tiny folders hold 512 positions (``max_position_embeddings``): a model.max_length
    of 1024 trains positions the model never saw, and the run says so."""
    from entrena.tasks.registry import get_task, load_config

    write_jsonl(tmp_path / "train.jsonl", chats(8))
    loaded = load_config(family_config(tmp_path, families("qwen3"),
                                       model={"max_length": 1024}))
    with caplog.at_level("WARNING", logger="entrena"):
        get_task("llm-sft").model_sources(loaded)
    assert "model.max_length = 1024 is longer than the 512 positions" in caplog.text
    caplog.clear()
    loaded = load_config(family_config(tmp_path, families("qwen3")))
    with caplog.at_level("WARNING", logger="entrena"):
        get_task("llm-sft").model_sources(loaded)
    assert "max_position_embeddings" not in caplog.text


def test_an_adapter_refuses_a_base_folder_that_changed_since_training(
        families, tmp_path, smol_tokenizer):  # noqa: F811 (the fixture)
    """A LoRA run remembers its base folder's fingerprint: the same folder loads; another
    model of the same shape put in its place (a fresh user's swap answered garbage with
    exit 0) is refused with the fix."""
    import shutil

    import entrena
    from entrena.errors import DataError
    from entrena.tasks.llm_sft.model import load_sft_model

    base = tmp_path / "base"
    shutil.copytree(families("qwen3"), base)
    write_jsonl(tmp_path / "train.jsonl", chats(8))
    result = entrena.train(family_config(tmp_path, base, train={"max_steps": 1}),
                           run_dir=tmp_path / "run")
    model_dir = result.run_dir / "model"
    meta = json.loads((model_dir / "entrena_model.json").read_text())
    assert meta["base_fingerprint"].startswith("sha256:")
    load_sft_model(model_dir)  # unchanged: loads
    other = family_folder("qwen3", tmp_path / "other", smol_tokenizer, seed=7)
    for weights in base.glob("*.safetensors"):
        shutil.copyfile(other / weights.name, weights)
    with pytest.raises(DataError, match="is not the one it was trained on .* put the original "
                                        "base back there, or train again"):
        load_sft_model(model_dir)
