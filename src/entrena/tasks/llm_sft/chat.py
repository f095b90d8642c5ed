"""``entrena chat`` for ``task: llm-sft``: a conversation with a run's model (PyTorch) or an
exported one (a GGUF bundle through llama.cpp, a ``hf`` bundle through PyTorch), greedy, the
prompt rendered by the model's chat template as in training.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ChatSession"]


class ChatSession:
    """Replies to a conversation.

    Args:
        location: The model (:class:`~entrena.exporting.prediction.ModelLocation`).
        max_new_tokens: The most tokens of one reply.
        context_tokens: The longest prompt; the oldest turns are dropped beyond it.
        threads: CPU threads.

    Raises:
        ResourceError: A GGUF bundle without llama-cpp-python installed.
    """

    def __init__(self, location: Any, *, max_new_tokens: int = 256, context_tokens: int = 2048,
                 threads: int | None = None):
        from entrena.tasks.llm_sft.model import _pad_id, build_tokenizer, load_sft_model

        self.max_new_tokens, self.context_tokens = int(max_new_tokens), int(context_tokens)
        self.system = location.meta.get("system_prompt")
        if location.manifest.get("format") == "gguf":
            from entrena.tasks.llm_sft.generators import GgufGenerator

            self.tokenizer = build_tokenizer(str(location.folder))
            self.generator: Any = GgufGenerator(
                location.folder / location.manifest["file"],
                context_tokens=self.context_tokens + self.max_new_tokens, threads=threads)
        else:
            import torch

            from entrena.tasks.llm_sft.generators import TorchGenerator

            if threads:
                torch.set_num_threads(int(threads))
            model, self.tokenizer, _ = load_sft_model(location.folder)
            self.generator = TorchGenerator(model.lm, eos_token_id=self.tokenizer.eos_token_id,
                                            pad_token_id=_pad_id(self.tokenizer))
        self.engine = self.generator.engine

    def reply(self, messages: list[dict[str, str]]) -> str:
        """The model's answer to ``messages`` (user and assistant turns, oldest first; the
        model's system prompt from training is put first when it had one)."""
        import numpy as np

        system = [{"role": "system", "content": self.system}] if self.system else []
        turns = list(messages)
        while True:
            prompt = self.tokenizer.apply_chat_template(system + turns, tokenize=False,
                                                        add_generation_prompt=True)
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) <= self.context_tokens or len(turns) <= 1:
                break
            turns = turns[2:] if len(turns) > 2 else turns[-1:]  # drop the oldest exchange
        ids = ids[-self.context_tokens:]
        answers = self.generator.generate([prompt], [np.asarray(ids, dtype=np.int64)],
                                          self.max_new_tokens)
        return self.tokenizer.decode(answers.ids[0], skip_special_tokens=True).strip()
