"""Write the bundled image example: scikit-learn's handwritten digits as PNG folders.

Source: `sklearn.datasets.load_digits` (shipped inside scikit-learn, no download): 1,797
grayscale 8 × 8 images of the digits 0-9 from the UCI "Optical Recognition of Handwritten
Digits" data set (Alpaydin & Kaynak, 1998), pixel values 0-16.

Writes `data/train/<digit>/<n>.png` (1,437 images) and `data/test/<digit>/<n>.png` (360
images) beside this script: a stratified 80/20 split seeded with 0
(`sklearn.model_selection.train_test_split`), each pixel scaled from 0-16 to 0-255
(`round(v * 255 / 16)`), 8-bit grayscale PNG. The file name `<n>` is the image's index in
`load_digits`, so the split can be traced back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
SEED = 0
TEST_FRACTION = 0.2


def main() -> None:
    digits = load_digits()
    images = np.rint(digits.images * 255.0 / 16.0).astype(np.uint8)  # (1797, 8, 8)
    index = np.arange(len(images))
    train, test = train_test_split(index, test_size=TEST_FRACTION, random_state=SEED,
                                   stratify=digits.target)
    out = HERE / "data"
    tmp = HERE / ".data.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for role, rows in (("train", train), ("test", test)):
        for i in sorted(rows):
            folder = tmp / role / str(digits.target[i])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[i], mode="L").save(folder / f"{i:04d}.png")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    for role, rows in (("train", train), ("test", test)):
        counts = np.bincount(digits.target[rows], minlength=10)
        print(f"wrote {out / role}: {len(rows)} images, per digit {counts.tolist()}")


if __name__ == "__main__":
    main()
