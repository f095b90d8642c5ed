"""Attention on a CPU: PyTorch's fused kernel (sdpa) against the unfused products, by length.

    .venv/bin/python benchmarks/experiments/attention_kernel.py [--heads 12] [--head-dim 32] [--batch 32]
        [--lengths 32 64 128 192 256 512] [--kv-heads N] [--causal] [--write]

Times forward + backward of one attention call (``entrena.engine.attention._time_both``:
the fastest of 3 calls; a quarter of the keys padded, as a length-grouped batch of reviews
is) in fp32 and bf16 at each length, without stopping where the fused kernel wins, and
forward alone without gradients (evaluation, prediction). Defaults: MiniLM-L6's head shape
and the demo's batch. Then what ``model.attn_implementation: auto`` picks here (the longest
length the unfused products train, :func:`entrena.engine.attention.measure_eager_up_to`).
With ``--write`` the table goes to docs/benchmarks-journal.md (``bench:attention-kernel``). A
decoder's shape (``--kv-heads 3 --causal``: grouped-query attention, the causal mask combined
with the padding; SmolLM2-135M is ``--heads 9 --kv-heads 3 --head-dim 64 --batch 8``) goes
to ``bench:attention-kernel-llm``. Run it alone on the cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import machine, today, write_section  # noqa: E402


def forward_only_ms(q, k, v, mask) -> tuple[float, float]:  # noqa: ANN001
    """Milliseconds of a forward without gradients: fused (key heads repeated, as
    transformers' sdpa does for grouped-query attention with a mask), then unfused."""
    import torch
    import torch.nn.functional as F

    from entrena.engine.attention import _time_ms, eager_attention

    groups = q.shape[1] // k.shape[1]

    def fused() -> None:
        keys, values = ((k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))
                        if groups > 1 else (k, v))
        F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)

    with torch.no_grad():
        return _time_ms(fused), _time_ms(lambda: eager_attention(q, k, v, mask))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 192, 256, 512])
    parser.add_argument("--kv-heads", type=int, default=None,
                        help="key/value heads (grouped-query attention); default --heads")
    parser.add_argument("--causal", action="store_true", help="a decoder's causal mask")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    kv_heads = args.kv_heads or args.heads
    import torch

    from entrena.engine.attention import _time_both, measure_eager_up_to, probe_lengths
    from entrena.engine.backend import configure_threads

    threads = configure_threads(None)
    rows = ["| dtype | tokens | sdpa fwd+bwd (ms) | unfused fwd+bwd (ms) | sdpa / unfused | "
            "sdpa fwd only (ms) | unfused fwd only (ms) |", "|---|---:|---:|---:|---:|---:|---:|"]
    picks = []
    for dtype in (torch.float32, torch.bfloat16):
        for tokens in args.lengths:
            shape = (args.batch, args.heads, tokens, args.head_dim)
            q = torch.randn(shape).to(dtype).requires_grad_()
            k, v = (torch.randn(args.batch, kv_heads, tokens, args.head_dim).to(dtype)
                    .requires_grad_() for _ in range(2))
            mask = torch.ones(args.batch, 1, tokens, tokens, dtype=torch.bool)
            mask[..., tokens - tokens // 4:] = False
            if args.causal:
                mask &= torch.ones(tokens, tokens, dtype=torch.bool).tril()
            sdpa_ms, eager_ms = _time_both(q, k, v, mask, torch.randn(shape).to(dtype))
            fwd_sdpa, fwd_eager = forward_only_ms(q, k, v, mask)
            rows.append(f"| {str(dtype).removeprefix('torch.')} | {tokens} | {sdpa_ms:.1f} | "
                        f"{eager_ms:.1f} | {sdpa_ms / eager_ms:.2f} | {fwd_sdpa:.1f} | "
                        f"{fwd_eager:.1f} |")
            print(rows[-1], flush=True)
        began = time.perf_counter()
        up_to, _ = measure_eager_up_to(args.heads, args.head_dim, dtype, batch=args.batch,
                                       lengths=probe_lengths(max(args.lengths)),
                                       kv_heads=kv_heads, causal=args.causal)
        picks.append(f"{str(dtype).removeprefix('torch.')}: unfused up to **{up_to}** tokens "
                     f"(0: never), measured in {time.perf_counter() - began:.1f} s")
    decoder = args.causal or kv_heads != args.heads
    extra = (f" --kv-heads {kv_heads}" if kv_heads != args.heads else "") + (
        " --causal" if args.causal else "")
    shape_text = (f"{args.heads} query heads on {kv_heads} key heads of {args.head_dim}"
                  + (", causal" if args.causal else "")) if decoder else (
        f"{args.heads} heads of {args.head_dim}")
    body = "\n".join([
        "## Attention kernels on a CPU (`attention_kernel.py`)"
        + (": a decoder's shape" if decoder else ""), "",
        f"Measured {today()} on {machine()}; {threads} torch threads. Command: `python "
        f"benchmarks/experiments/attention_kernel.py --heads {args.heads} --head-dim {args.head_dim} "
        f"--batch {args.batch} --lengths {' '.join(map(str, args.lengths))}{extra} --write` "
        f"(one attention call of batch {args.batch} × {shape_text}, a quarter of the keys "
        f"padded; the fastest of 3 calls).", "",
        *rows, "", "What `model.attn_implementation: auto` picks here for training (the unfused "
        "products up to the longest length where they took at most 0.9× the fused kernel's "
        "time): " + "; ".join(picks) + "."])
    print(body)
    if args.write:
        write_section("attention-kernel-llm" if decoder else "attention-kernel", body)


if __name__ == "__main__":
    main()
