"""The GGUF pieces that need no llama.cpp: the header reader against the ``gguf`` package's
writer, and the Modelfile derived from SmolLM2's chat template. (The GGUF files themselves are
written by llama.cpp's converter: tests/test_gguf_convert.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from test_llm_sft import smol_tokenizer  # noqa: F401

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
