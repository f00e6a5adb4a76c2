#!/usr/bin/env python3
"""Datalog rules that used to fall off the join engine, timed with `tl bench` (evaluation
only, one thread): a recursive rule with a value comparison, head index arithmetic, and a
closure on bit matrices followed by a count.

    python3 bench/scale/rules.py

Builds target/release/tl and writes seeded data under bench/scale/data/."""
import os, subprocess

from run import DATA, ROOT, TL, edges

PROGRAMS = {
    "Reach with W[x, y] > 0.5, 5k nodes, 25k edges": (
        "Nodes : 5000\nEdge : bool[Nodes, Nodes]\nEdge = \"rules_e25k.tsv\"\n"
        "W : real[Nodes, Nodes]\nW = \"rules_w25k.tsv\"\nReach(0).\n"
        "Reach(y) :- Reach(x), Edge(x, y), W[x, y] > 0.5\nCount = Reach(x)\n"
    ),
    "Nat(n + 1) :- Nat(n), n < 9000": "Nat(0).\nNat(n + 1) :- Nat(n), n < 9000.\nCount = Nat(n)\n",
    "closure of 5k nodes, 20k edges (24M pairs), then Total = Path(x, y)": (
        "Nodes : 5000\nEdge : bool[Nodes, Nodes]\nEdge = \"rules_e20k.tsv\"\n"
        "Path(x, y) :- Edge(x, y)\nPath(x, z) :- Path(x, y), Edge(y, z)\nTotal = Path(x, y)\n"
    ),
}


def main():
    os.makedirs(DATA, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    edges("rules_e25k.tsv", 5000, 25000, 5, False)
    edges("rules_w25k.tsv", 5000, 25000, 5, True)
    edges("rules_e20k.tsv", 5000, 20000, 6, False)
    print("| program | tl ms (best of 10) |")
    print("|---|---|")
    for k, (name, src) in enumerate(PROGRAMS.items()):
        path = os.path.join(DATA, f"rules_{k}.tl")
        with open(path, "w") as f:
            f.write(src)
        out = subprocess.run([TL, "bench", path, "--repeat", "10", "--threads", "1"], cwd=DATA,
                             capture_output=True, text=True, check=True)
        best = out.stdout.strip().splitlines()[-1].split("min ")[1].split(" ms")[0]
        print(f"| {name} | {best} |")


if __name__ == "__main__":
    main()
