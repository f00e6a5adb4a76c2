"""Time `why` after evaluation: per fact of a 2M-tuple closure and of the Andersen 100k
points-to analysis, and per element of the Table-1 GNN (top 5 terms, depth 2).

Uses the Python package (`pip install ./python`) so that evaluation runs once and only the
explanations are timed: `prog.run()`, then `prog.why(atom)` for 20 facts or elements drawn
with a fixed seed from what the run derived. The Datalog workloads run again with
`prog.run(provenance=True)`, which records each tuple's round for `why` to walk down.

    python3 bench/why/run.py
    python3 bench/why/run.py --cost   # what recording rounds costs the evaluation
"""

import importlib.util
import os
import random
import statistics
import sys
import time

import tensorlogic as tl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


datalog = load("datalog_bench", os.path.join(ROOT, "bench", "datalog", "run.py"))
scale = load("scale_bench", os.path.join(ROOT, "bench", "scale", "run.py"))
gen = load("scale_gen", os.path.join(ROOT, "bench", "scale", "gen.py"))


def timed(prog, atoms, **options):
    times = []
    for a in atoms:
        t = time.perf_counter()
        tree = prog.why(a, **options)
        times.append((time.perf_counter() - t) * 1e3)
        assert tree.label.startswith(a.split("[")[0].split("(")[0])
    return statistics.median(times), max(times)


def datalog_case(workload, relation, count=20, provenance=False):
    kind, make = datalog.workloads()[workload]
    d = make()
    prog = tl.Program(datalog.TL_PROGRAMS[kind], base_dir=d)
    t = time.perf_counter()
    prog.run(write_files=False, provenance=provenance)
    run_s = time.perf_counter() - t
    rows = prog.rows(relation)
    picks = random.Random(7).sample(rows, count)
    atoms = [f"{relation}({a}, {b})" for a, b in picks]
    med, worst = timed(prog, atoms)
    name = f"{workload}, `provenance=True`" if provenance else workload
    return name, len(rows), run_s, med, worst


def gnn_case(count=20):
    d = os.path.join(ROOT, "bench", "scale", "data")
    os.makedirs(d, exist_ok=True)
    gen.write_edges(os.path.join(d, "edges_20k.tsv"), 20000, 100000, 7)
    prog = tl.Program(scale.GNN_MATRIX, base_dir=d)
    t = time.perf_counter()
    prog.run(write_files=False)
    run_s = time.perf_counter() - t
    rnd = random.Random(7)
    atoms = [f"Emb[{rnd.randrange(20000)}, 2, {rnd.randrange(64)}]" for _ in range(count)]
    med, worst = timed(prog, atoms, top=5, depth=2)
    return "gnn-20k (Emb[n, 2, d])", 20000 * 3 * 64, run_s, med, worst


def provenance_cost(rounds=7):
    """What recording rounds costs the evaluation: Andersen run with and without
    `provenance=True`, alternating, medians of `rounds`."""
    kind, make = datalog.workloads()["andersen-100k"]
    d = make()
    times = {False: [], True: []}
    for _ in range(rounds):
        for provenance in (False, True):
            prog = tl.Program(datalog.TL_PROGRAMS[kind], base_dir=d)
            t = time.perf_counter()
            prog.run(write_files=False, provenance=provenance)
            times[provenance].append(time.perf_counter() - t)
    plain, recorded = (statistics.median(times[p]) for p in (False, True))
    print(f"andersen-100k run: {plain:.3f} s, with provenance {recorded:.3f} s "
          f"({recorded / plain:.2f}x)")


def main():
    if "--cost" in sys.argv:
        provenance_cost()
        return
    print("| workload | tuples or elements | run s | why median ms | why max ms |")
    print("|---|---|---|---|---|")
    for case in [lambda: datalog_case("tc-chain-2000", "Path"),
                 lambda: datalog_case("andersen-100k", "PointsTo"),
                 lambda: datalog_case("tc-chain-2000", "Path", provenance=True),
                 lambda: datalog_case("andersen-100k", "PointsTo", provenance=True),
                 gnn_case]:
        name, size, run_s, med, worst = case()
        print(f"| {name} | {size} | {run_s:.2f} | {med:.1f} | {worst:.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
