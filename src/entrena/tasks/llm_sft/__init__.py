"""The ``llm-sft`` task: chat data, a causal LM with LoRA (PEFT) or full fine-tuning,
target-token loss, generation metrics, a zero-shot baseline, prediction."""

__all__ = ["LlmSftTask"]


def __getattr__(name: str):
    if name == "LlmSftTask":  # imported on first use: no torch at config time
        from entrena.tasks.llm_sft.task import LlmSftTask

        return LlmSftTask
    raise AttributeError(name)
