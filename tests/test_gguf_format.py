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


def _tokenizer_gguf(path, vocab: int):
    """A GGUF file holding only a ``vocab``-token byte-pair tokenizer (what the export copies
    from the base model's file)."""
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([f"t{i}" for i in range(vocab)])
    writer.add_token_types([1] * vocab)
    writer.add_token_merges(["t 1"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_written_tiny_llama_reads_back_in_transformers_with_equal_logits(tmp_path):
    """transformers undoes llama.cpp's Q/K permutation when it reads a GGUF file, so equal
    logits check the tensor names, the permutation and the hyperparameters (without the
    permutation the logits differ by ~1e-3). A 64-token vocabulary: transformers' GGUF reader
    takes minutes over SmolLM2's 49,152 tokens and merges."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from entrena.exporting.gguf_writer import tensor_types, write_llama_gguf

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=64, tie_word_embeddings=True, rope_theta=50000.0, eos_token_id=1,
        **ARCH)).eval()
    info = write_llama_gguf(model, tmp_path / "m.gguf",
                            tokenizer_gguf=_tokenizer_gguf(tmp_path / "tokenizer.gguf", 64),
                            chat_template="{{ messages }}", eos_token_id=1, name="tiny")
    assert info["tensors"] == 2 * 9 + 2  # tied output: no output.weight
    assert tensor_types(tmp_path / "m.gguf") == {"F32": 20}
    back = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                dtype=torch.float32).eval()
    assert back.config.num_key_value_heads == ARCH["num_key_value_heads"]
    ids = torch.tensor([[3, 5, 7, 11, 13, 2, 60, 1]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, back(ids).logits, atol=1e-5)


def test_a_vocabulary_unlike_the_tokenizer_file_is_refused(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from entrena.errors import DataError
    from entrena.exporting.gguf_writer import write_llama_gguf

    model = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=64, **ARCH))
    with torch.no_grad(), pytest.raises(DataError, match="has 32 tokens and the model's "
                                                         "embedding 64 rows"):
        write_llama_gguf(model, tmp_path / "m.gguf",
                         tokenizer_gguf=_tokenizer_gguf(tmp_path / "t.gguf", 32),
                         chat_template="", eos_token_id=1, name="tiny")
    assert not (tmp_path / "m.gguf").exists()


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
