"""Writes the synthetic graph of examples/gnn_classifier.tl. Run once; its output is committed:

    python3 -m pip install numpy && python3 scripts/gnn_data.py

Two communities of 60 nodes (a stochastic block model: an edge inside a community with
probability 0.15, across with 0.01, both directions stored). Each node has 8 features whose
mean is shifted by 0.4 toward its community's direction under unit Gaussian noise, so a
node's own features classify it poorly and its neighbourhood's well. Half the nodes of each
community train, the rest are held out."""

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "examples" / "data"


def main():
    rng = np.random.default_rng(7)
    n, per = 120, 60
    label = np.repeat([0, 1], per)
    same = label[:, None] == label[None, :]
    p = np.where(same, 0.15, 0.01)
    upper = np.triu(rng.random((n, n)) < p, 1)
    adj = upper | upper.T
    direction = rng.standard_normal((2, 8))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    x = rng.standard_normal((n, 8)) + 0.4 * direction[label]
    y = np.eye(2)[label]
    train = np.zeros(n)
    for c in (0, 1):
        idx = np.flatnonzero(label == c)
        train[rng.permutation(idx)[: per // 2]] = 1
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "gnnc_edges.tsv", "w") as f:
        for a, b in zip(*np.nonzero(adj)):
            f.write(f"{a}\t{b}\n")
    np.save(OUT / "gnnc_x.npy", x.astype(np.float32))
    np.save(OUT / "gnnc_y.npy", y.astype(np.float32))
    np.save(OUT / "gnnc_train.npy", train.astype(np.float32))
    np.save(OUT / "gnnc_test.npy", (1 - train).astype(np.float32))
    print(f"wrote {n} nodes and {int(adj.sum())} directed edges to {OUT}")


if __name__ == "__main__":
    main()
