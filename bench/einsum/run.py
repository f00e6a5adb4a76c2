"""Tensor networks from the `einsum-benchmark` package's generators, each one Tensor Logic
equation, against opt_einsum's greedy path (NumPy backend) in the same run.

    python3 bench/einsum/run.py            # needs numpy, opt_einsum, einsum_benchmark[generators]

For each instance: writes its tensors as .npy and the equation as a .tl program, runs
`tl run --threads 1 --precision f64` (best of 3, whole process, writing the answer to `s.npy`) and the same program with
`S = 1` in place of the equation (process start, reading the files, checking, writing
`s.npy`: the baseline), times the evaluation alone with `tl bench` (median of 20, planning
excluded), times `opt_einsum.contract(..., optimize='greedy')` (best of 3, in process, path
search included), checks the two answers agree (relative 1e-6), and prints the FLOPs of
both paths as opt_einsum counts them (tl's tree read from `tl explain`). "tl s" is the whole process less the baseline.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import opt_einsum
from einsum_benchmark.generators import random as rnd, structured

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TL = os.path.join(ROOT, "target", "release", "tl")

INSTANCES = [
    ("random 3-regular, 40 tensors", lambda: rnd.regular(40, 3, seed=0)),
    ("random 3-regular, 100 tensors", lambda: rnd.regular(100, 3, seed=0)),
    ("tree, 30 tensors", lambda: structured.tree(30, seed=1)),
    ("tree, 60 tensors", lambda: structured.tree(60, seed=1)),
    ("lattice 6x6", lambda: structured.lattice((6, 6), seed=0)),
    ("lattice 10x10", lambda: structured.lattice((10, 10), seed=0)),
    ("matrix chain, 20", lambda: structured.matrix_chain(20, 10, 200, seed=0)),
]


def program(eq, shapes, folder):
    """The equation as a Tensor Logic program over .npy files; returns its text."""
    ins, out = eq.split("->")
    names = {}

    def var(ch):
        names.setdefault(ch, f"i{len(names)}")
        return names[ch]

    rng = np.random.default_rng(0)
    arrays = []
    lines = []
    factors = []
    for k, (term, shape) in enumerate(zip(ins.split(","), shapes)):
        a = rng.uniform(0.5, 1.0, size=shape).astype(np.float32)
        arrays.append(a)
        if len(term) == 0:
            lines.append(f"T{k} = {float(a)}")
            factors.append(f"T{k}")
            continue
        np.save(os.path.join(folder, f"t{k}.npy"), a)
        lines.append(f'T{k} = "t{k}.npy"')
        factors.append(f"T{k}[{', '.join(var(c) for c in term)}]")
    head = f"S[{', '.join(var(c) for c in out)}]" if out else "S"
    lines.append(f"{head} = {' '.join(factors)}")
    lines.append('"s.npy" = S')
    return "\n".join(lines) + "\n", arrays


def tl_path(explain):
    """tl's contraction trees from `tl explain` ("term 1: ((T0 · T1) · T2) [...]"; a sum over
    groups of factors that share no summed variable is one term per group, multiplied last)
    as an opt_einsum path (pairs of positions in the shrinking operand list), so that
    opt_einsum counts its FLOPs the way it counts its own."""
    trees = []
    for line in explain.splitlines():
        if not re.match(r"\s*term \d+:", line):
            continue
        tokens = re.findall(r"\(|\)|T\d+", line.split(":", 1)[1].rsplit("[", 1)[0])
        pos = 0

        def tree():
            nonlocal pos
            tok = tokens[pos]
            pos += 1
            if tok == "(":
                a, b = tree(), tree()
                pos += 1  # ")"
                return (a, b)
            return int(tok[1:])

        trees.append(tree())
    root = trees[0]
    for t in trees[1:]:
        root = (root, t)
    ssa = []
    n = len(re.findall(r"\d+", str(root)))

    def walk(t):
        if isinstance(t, int):
            return t
        a, b = walk(t[0]), walk(t[1])
        ssa.append((a, b))
        return n + len(ssa) - 1

    walk(root)
    return opt_einsum.paths.ssa_to_linear(ssa)


def best(f, n=3):
    times = []
    out = None
    for _ in range(n):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    print("| instance | tensors | tl s (process) | tl s (less start, load and write) | tl evaluation s (`tl bench`) | opt_einsum greedy s | ratio (process less baseline) | ratio (evaluation) | tl FLOPs / greedy FLOPs | agree |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make in INSTANCES:
        eq, shapes = make()
        with tempfile.TemporaryDirectory() as d:
            text, arrays = program(eq, shapes, d)
            path = os.path.join(d, "net.tl")
            open(path, "w").write(text)
            base = re.sub(r"^S(\[.*\])? = .*$", "S = 1", text, flags=re.M)
            open(os.path.join(d, "base.tl"), "w").write(base)
            run = lambda f: subprocess.run([TL, "run", "--threads", "1", "--precision", "f64", f], cwd=d, capture_output=True, text=True, timeout=600)
            t_base, _ = best(lambda: run("base.tl"))
            t_tl, out = best(lambda: run("net.tl"))
            timed = subprocess.run([TL, "bench", "--threads", "1", "--precision", "f64", "--repeat", "20", "net.tl"], cwd=d, capture_output=True, text=True)
            m = re.search(r"median ([0-9.]+) ms", timed.stdout + timed.stderr)
            t_eval = float(m.group(1)) / 1000 if m else float("nan")
            if out.returncode != 0:
                print(f"| {name} | {len(shapes)} | failed: {out.stderr.strip()[:120]} | | | | | |")
                continue
            explain = subprocess.run([TL, "explain", "net.tl"], cwd=d, capture_output=True, text=True).stdout
            ops = [a.astype(np.float64) for a in arrays]
            t_np, want = best(lambda: opt_einsum.contract(eq, *ops, optimize="greedy"))
            _, info = opt_einsum.contract_path(eq, *ops, optimize="greedy")
            got = np.ravel(np.load(os.path.join(d, "s.npy")))
            want = np.ravel(want)
            agree = len(got) == want.size and np.allclose(got, want, rtol=1e-6)
            _, ours = opt_einsum.contract_path(eq, *ops, optimize=tl_path(explain))
            ratio = f"{float(ours.opt_cost) / float(info.opt_cost):.2f}"
            net = max(t_tl - t_base, 1e-4)
            print(f"| {name} | {len(shapes)} | {t_tl:.3f} | {net:.4f} | {t_eval:.4f} | {t_np:.4f} | {net / t_np:.2f} | {t_eval / t_np:.2f} | {ratio} | {'yes' if agree else 'NO'} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
