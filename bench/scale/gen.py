"""Data for the scale benchmark (seeded): graphs, weights and observations."""
import os, random, sys
import numpy as np

def write_edges(path, nodes, edges, seed):
    if os.path.exists(path):
        return
    rng = random.Random(seed)
    out = set()
    while len(out) < edges:
        out.add((rng.randrange(nodes), rng.randrange(nodes)))
    with open(path, "w") as f:
        for a, b in sorted(out):
            f.write(f"{a}\t{b}\n")

def write_weighted(path, nodes, edges, seed):
    if os.path.exists(path):
        return
    rng = random.Random(seed)
    out = {}
    while len(out) < edges:
        out[(rng.randrange(nodes), rng.randrange(nodes))] = round(rng.random(), 4)
    with open(path, "w") as f:
        for (a, b), w in sorted(out.items()):
            f.write(f"{a}\t{b}\t{w}\n")

def npy(path, array):
    if not os.path.exists(path):
        np.save(path, array)

if __name__ == "__main__":
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    write_edges(os.path.join(d, "edges_20k.tsv"), 20000, 100000, 7)
    write_weighted(os.path.join(d, "weighted_20k.tsv"), 20000, 100000, 8)
    write_edges(os.path.join(d, "edges_5k.tsv"), 5000, 25000, 9)
    write_edges(os.path.join(d, "edges_1k.tsv"), 1000, 5000, 10)
