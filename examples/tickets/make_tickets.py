"""Write a made-up help-desk export, as a spreadsheet in a European locale saves it.

Nothing here is real customer data: every ticket is drawn from a few phrases per category,
seeded, so the file is the same on every machine. What makes it "as it comes":

- `;`-separated and encoded in Windows-1252 (`€`, `é`), as Excel saves a CSV in such a locale;
- the text in two columns, `subject` and `description`, and some descriptions empty;
- categories spelled inconsistently: `Billing`, `billing`, `billing ` and the old name
  `Invoices` for one class; `Technical` and `technical`;
- with `--multi-label`, a `tags` column of `|`-joined tags instead.

Usage: `python make_tickets.py [FOLDER] [--rows N]` writes `FOLDER/train.csv` (N rows,
default 600) and `FOLDER/test.csv` (N / 4 rows); FOLDER defaults to `data/` beside this file.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

CATEGORIES = {
    "billing": (["Charged twice", "Invoice question", "Refund for March", "Wrong amount"],
                ["I was charged twice for my subscription, please refund the €12.",
                 "The invoice shows the wrong amount and VAT number.",
                 "My card was billed although I cancelled; I want a refund.",
                 "Please send a corrected invoice to our accounts team."]),
    "technical": (["App crashes", "Cannot log in", "Error 500", "Sync broken"],
                  ["The app crashes when I open the settings page.",
                   "I get error 500 after the last update, on every device.",
                   "Login fails with a timeout although my password is right.",
                   "Data does not sync between the phone and the laptop."]),
    "account": (["Change e-mail", "Delete my account", "New user for colleague",
                 "Rename company"],
                ["Please change the e-mail address on my account to the new one.",
                 "I want my account and all my data deleted.",
                 "Can you add a user for my colleague René in our team?",
                 "Our company changed its name; please update the profile."]),
}
SPELLINGS = {"billing": ["Billing", "billing", "billing ", "Invoices"],
             "technical": ["Technical", "technical"], "account": ["Account"]}
"""How the export spells each category (the first is the most frequent)."""


def tickets(n: int, seed: int) -> list[tuple[str, str, str, str]]:
    """``n`` rows of ``(subject, description, category as spelled, tags)``."""
    rng = random.Random(seed)
    rows = []
    names = sorted(CATEGORIES)
    for i in range(n):
        category = names[i % len(names)]
        subjects, bodies = CATEGORIES[category]
        subject = f"{rng.choice(subjects)} #{rng.randint(100, 999)}"
        body = "" if rng.random() < 0.1 else rng.choice(bodies)
        spellings = SPELLINGS[category]
        weights = [6] + [1] * (len(spellings) - 1)
        spelled = rng.choices(spellings, weights=weights)[0]
        tags = [category] + ([rng.choice([c for c in names if c != category])]
                             if rng.random() < 0.3 else [])
        rows.append((subject, body, spelled, "|".join(sorted(tags))))
    return rows


def write(path: Path, rows: list[tuple[str, str, str, str]], multi_label: bool) -> None:
    """``;``-separated Windows-1252 CSV with a header, values quoted where needed."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="cp1252") as handle:
        out = csv.writer(handle, delimiter=";")
        out.writerow(["subject", "description", "tags" if multi_label else "category"])
        for subject, body, category, tags in rows:
            out.writerow([subject, body, tags if multi_label else category])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=HERE / "data")
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--multi-label", action="store_true")
    args = parser.parse_args(argv)
    write(args.folder / "train.csv", tickets(args.rows, seed=1), args.multi_label)
    write(args.folder / "test.csv", tickets(max(12, args.rows // 4), seed=2), args.multi_label)
    print(f"wrote {args.folder / 'train.csv'} and {args.folder / 'test.csv'}")


if __name__ == "__main__":
    main()
