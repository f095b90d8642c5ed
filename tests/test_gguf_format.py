"""The GGUF pieces that need no llama.cpp: the header reader against the ``gguf`` package's
writer, the Q/K permutation, a tiny Llama written and read back by ``transformers`` with the
same logits, and the Modelfile derived from SmolLM2's chat template."""

from __future__ import annotations

import numpy as np
import pytest

from test_llm_sft import ARCH, smol_tokenizer  # noqa: F401

gguf = pytest.importorskip("gguf")


def test_the_header_reader_reads_what_the_gguf_writer_wrote(tmp_path):
    from entrena.exporting.gguf_reader import read_gguf_header

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_uint32("llama.block_count", 3)
    writer.add_float32("llama.rope.freq_base", 100000.0)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_string("tokenizer.chat_template", "{{ x }}\nü")
    writer.add_array("tokenizer.ggml.tokens", ["<|a|>", "b", "é", ""][:3])
    writer.add_array("tokenizer.ggml.token_type", [3, 1, 1])
    writer.add_tensor("token_embd.weight", np.ones((3, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = read_gguf_header(path)
    fields = header.fields
    assert fields["general.architecture"].value == "llama"
    assert fields["llama.block_count"].value == 3
    assert fields["llama.rope.freq_base"].value == 100000.0
    assert fields["tokenizer.ggml.add_bos_token"].value is False
    assert fields["tokenizer.chat_template"].value == "{{ x }}\nü"
    assert fields["tokenizer.ggml.tokens"].value == ["<|a|>", "b", "é"]
    assert fields["tokenizer.ggml.tokens"].sub_type == gguf.GGUFValueType.STRING
    assert fields["tokenizer.ggml.token_type"].value == [3, 1, 1]
    assert header.tensors == [("token_embd.weight", (32, 3), gguf.GGMLQuantizationType.F32),
                              ("output_norm.weight", (32,), gguf.GGMLQuantizationType.F16)]


def test_permute_rotary_interleaves_the_halves_of_each_head():
    from entrena.exporting.gguf_writer import permute_rotary

    # 2 heads of size 4, one input column: rows [0..3] [4..7] -> per head (0, 2, 1, 3)
    weight = np.arange(8, dtype=np.float32).reshape(8, 1)
    assert permute_rotary(weight, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.slow
def test_a_written_tiny_llama_reads_back_in_transformers_with_equal_logits(
        tmp_path, smol_tokenizer):  # noqa: F811
    """transformers undoes llama.cpp's Q/K permutation when it reads a GGUF file, so equal
    logits check the tensor names, the permutation and the hyperparameters. Slow: its GGUF
    reader converts the whole tokenizer (162 s on the busy 2-core machine)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from entrena.config.models import MODEL_ALIASES
    from entrena.exporting.gguf_writer import tensor_types, write_llama_gguf

    tokenizer = AutoTokenizer.from_pretrained(smol_tokenizer)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=len(tokenizer), tie_word_embeddings=True, rope_theta=50000.0,
        eos_token_id=tokenizer.eos_token_id, **ARCH)).eval()
    info = write_llama_gguf(model, tmp_path / "m.gguf",
                            tokenizer_gguf=MODEL_ALIASES["smollm2-135m"].path(),
                            chat_template=tokenizer.chat_template,
                            eos_token_id=tokenizer.eos_token_id, name="tiny")
    assert info["tensors"] == 2 * 9 + 2  # tied output: no output.weight
    assert tensor_types(tmp_path / "m.gguf") == {"F32": 20}
    back = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                dtype=torch.float32).eval()
    ids = torch.tensor([tokenizer("<|im_start|>user\nhello there<|im_end|>\n")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, back(ids).logits, atol=1e-5)


def test_the_modelfile_of_smollm2_spells_out_its_chatml_template(smol_tokenizer):  # noqa: F811
    from transformers import AutoTokenizer

    from entrena.exporting.modelfile import chat_structure, render_modelfile

    tokenizer = AutoTokenizer.from_pretrained(smol_tokenizer)
    text = render_modelfile(chat_structure(tokenizer), stop=[tokenizer.eos_token])
    assert text == (
        'FROM ./model.gguf\n'
        'TEMPLATE """{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n'
        '{{ end }}<|im_start|>assistant\n"""\n'
        'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""\n'
        'PARAMETER stop "<|im_end|>"\nPARAMETER temperature 0\n')


def test_a_template_that_is_not_turn_by_turn_is_refused():
    from entrena.errors import DataError
    from entrena.exporting.modelfile import chat_structure

    class Odd:  # the first user turn rendered unlike the others
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            out = "".join(f"[{m['role']}|{m['content']}]" if i else f"<<{m['content']}>>"
                          for i, m in enumerate(messages))
            return out + ("[assistant|" if add_generation_prompt else "")

    with pytest.raises(DataError, match="no Ollama TEMPLATE"):
        chat_structure(Odd())
