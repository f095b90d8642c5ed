"""Does padding prediction batches to a multiple of tokens make ``entrena predict`` faster?

``entrena predict`` batches texts sorted by length (:func:`entrena.exporting.inference.
predict_logits`) and pads each batch to its longest text; training pads to a multiple of
``data.pad_to_multiple_of`` (16), which on a CPU keeps bf16 training steps faster (few batch
widths: few kernel builds, a smaller heap). This times the same sorted batches of a trained
run's model (fp32, as ``entrena predict`` runs a run's model) padded to the longest text and to
a multiple of ``--multiple``, alternated in one process, ``--pairs`` times, on the reviews
demo's 1,000 test texts. Run it alone on the cores.

    .venv/bin/python benchmarks/experiments/predict_padding.py RUN_DIR [--multiple 16] [--pairs 3]

RUN_DIR: a finished ``entrena train examples/reviews/config.yaml`` run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--multiple", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import numpy as np
    import pandas as pd
    import torch

    from entrena.data.batching import pad_batch, sequential_batches
    from entrena.exporting.bundle import Preprocessing
    from entrena.exporting.inference import TextEncoder, TorchRunner
    from entrena.tasks.text.model import load_classifier, model_length_limit

    torch.set_num_threads(args.threads)
    model, tokenizer, meta = load_classifier(args.run_dir / "model")
    prep = Preprocessing(labels=list(meta["labels"]), max_length=int(meta["max_length"]),
                         length_limit=model_length_limit(model.encoder.config, tokenizer))
    texts = pd.read_csv(ROOT / "examples" / "reviews" / "data" / "test.csv")["review"]
    encoded = TextEncoder(tokenizer, prep).encode(texts.astype(str).tolist())
    runner = TorchRunner(model.eval())
    lengths = encoded.lengths(prep.max_length)

    def seconds(multiple: int) -> tuple[float, np.ndarray]:
        started, out = time.perf_counter(), []
        for index in sequential_batches(lengths, 32):
            ids, mask = pad_batch([encoded.get(i, prep.max_length) for i in index],
                                  tokenizer.pad_token_id, multiple, prep.max_length)
            out.append(runner(ids, mask))
        return time.perf_counter() - started, np.concatenate(out)

    for pair in range(args.pairs):
        for multiple in (1, args.multiple) if pair % 2 == 0 else (args.multiple, 1):
            took, logits = seconds(multiple)
            print(f"padded to a multiple of {multiple}: {took:.2f} s "
                  f"({len(logits)} texts)", flush=True)


if __name__ == "__main__":
    main()
