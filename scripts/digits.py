"""Converts the UCI / scikit-learn 8x8 handwritten digits (1,797 samples; public domain / BSD)
into the .npy files the learning examples read. Run once; its output is committed:

    python3 -m pip install numpy scikit-learn && python3 scripts/digits.py

Pixels are scaled from 0..16 to 0..1; labels are one-hot. The samples are shuffled with a
fixed seed (as scikit-learn's `train_test_split` does by default); the first 1,437 train and
the other 360 are held out.
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

OUT = Path(__file__).resolve().parent.parent / "examples" / "data"
TRAIN = 1437


def main():
    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    x = (d.data[order] / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[d.target[order]]
    OUT.mkdir(parents=True, exist_ok=True)
    np.save(OUT / "digits_train_x.npy", x[:TRAIN])
    np.save(OUT / "digits_train_y.npy", y[:TRAIN])
    np.save(OUT / "digits_test_x.npy", x[TRAIN:])
    np.save(OUT / "digits_test_y.npy", y[TRAIN:])
    print(f"wrote {TRAIN} training and {len(x) - TRAIN} held-out digits to {OUT}")


if __name__ == "__main__":
    main()
