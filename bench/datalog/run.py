#!/usr/bin/env python3
"""The Datalog benchmark: tl against ascent (compiled Datalog), Soufflé (interpreted and
compiled, where a `souffle` is on PATH or in $SOUFFLE) and DuckDB (recursive CTEs) on the same
generated inputs, in one invocation.

    python3 bench/datalog/run.py [WORKLOAD ...]      # all workloads when none are named

Builds target/release/tl and bench/datalog/ascent-bench, installs duckdb into bench/.venv,
generates the inputs (fixed seeds) under bench/datalog/data/, checks that every system derives
the same number of tuples, and prints a Markdown table of wall times, ratios and peak memory.
tl and ascent are timed as whole processes (start, load, fixpoint; no output written); DuckDB
is timed in-process (load and query, excluding the Python start and the import)."""
import os, random, shutil, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(HERE, "data")
VENV = os.path.join(ROOT, "bench", ".venv")
TL = os.path.join(ROOT, "target", "release", "tl")
ASCENT = os.path.join(HERE, "ascent-bench", "target", "release", "ascent-bench")
TIMEOUT = 900


def write_pairs(path, pairs):
    with open(path, "w") as f:
        f.writelines("%d\t%d\n" % p for p in pairs)


def gen_tc(name, n, edges):
    d = os.path.join(DATA, name)
    os.makedirs(d, exist_ok=True)
    write_pairs(os.path.join(d, "edge.tsv"), sorted(set(edges)))
    return d


def workloads():
    """Each workload draws from its own seeded generator, so its input is the same whichever
    workloads are run."""
    rng = lambda name: random.Random("20261129-" + name)
    w = {}
    w["tc-chain-2000"] = ("tc", lambda: gen_tc("tc-chain-2000", 2000, [(i, i + 1) for i in range(1999)]))
    w["tc-random-5000-20000"] = ("tc", lambda: gen_tc("tc-random-5000-20000", 5000, random_edges(rng("random"), 5000, 20000)))
    w["tc-dense-1000"] = ("tc", lambda: gen_tc("tc-dense-1000", 1000, [(i, (i + 1) % 1000) for i in range(1000)] + random_edges(rng("dense"), 1000, 10000)))
    w["sg-tree-20000"] = ("sg", lambda: gen_sg(rng("sg")))
    w["andersen-100k"] = ("andersen", lambda: gen_andersen(rng("andersen")))
    # Context-insensitive points-to sets merge past a threshold, so this model's closure is
    # chaotic in the seed (0.1M to over 15M tuples): this seed gives 0.9M.
    w["pointsto-10k"] = ("pointsto", lambda: gen_pointsto(random.Random("pt")))
    w["triangle-20k"] = ("triangle", lambda: gen_tc("triangle-20k", 2000, random_edges(rng("triangle"), 2000, 20000)))
    w["triangle-skewed-20k"] = ("triangle", lambda: gen_skewed(rng("skewed")))
    # N0 starts a chain of 1,000 nodes into a random graph, so that it reaches a real part of it.
    w["reach-100k"] = ("reach", lambda: gen_tc("reach-100k", 100000, [(i, i + 1) for i in range(1000)] + random_edges(rng("reach"), 100000, 99000)))
    w["strings-100k"] = ("strings", gen_people)
    return w


def gen_people():
    """100,000 (first, last) name pairs over 1,000 last names, for string functions."""
    d = os.path.join(DATA, "strings-100k")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "people.tsv"), "w") as f:
        f.writelines("first%d\tlast%d\n" % (i, i % 1000) for i in range(100000))
    return d


def random_edges(rnd, n, m):
    edges = set()
    while len(edges) < m:
        a, b = rnd.randrange(n), rnd.randrange(n)
        if a != b:
            edges.add((a, b))
    return sorted(edges)


def gen_sg(rnd):
    d = os.path.join(DATA, "sg-tree-20000")
    os.makedirs(d, exist_ok=True)
    write_pairs(os.path.join(d, "parent.tsv"), [(i, rnd.randrange(i)) for i in range(1, 20000)])
    return d


def gen_andersen(rnd):
    """About 100k facts shaped like a program: 40,000 variables in 2,857 functions of 14,
    with addresses taken, copies, loads and stores inside a function, and 5% of the copies
    passing an argument to a parameter (variable 0) or a return value (variable 1) of one of
    the next three functions. (Uniformly random facts make every variable point to almost
    everything, which no real program does: the closure then runs for many minutes in every
    engine.)"""
    d = os.path.join(DATA, "andersen-100k")
    os.makedirs(d, exist_ok=True)
    funcs, per = 2857, 14
    local = lambda f: f * per + rnd.randrange(per)
    counts = [("address_of", 30000), ("assign", 40000), ("load", 15000), ("store", 15000)]
    for name, count in counts:
        pairs = set()
        while len(pairs) < count:
            f = rnd.randrange(funcs)
            if name == "assign" and rnd.random() < 0.05:
                g = min(funcs - 1, f + 1 + rnd.randrange(3))
                pair = (g * per, local(f)) if rnd.random() < 0.5 else (local(f), g * per + 1)
            else:
                pair = (local(f), local(f))
            if pair[0] != pair[1] or name == "address_of":
                pairs.add(pair)
        write_pairs(os.path.join(d, name + ".tsv"), sorted(pairs))
    return d


def gen_pointsto(rnd, funcs=10000):
    """A C program's points-to facts, about 3 MB: 10,000 functions with parameters, a return
    variable, 6-17 locals and 1-3 allocation sites each; copies, loads and stores among a
    function's variables; 1-5 call sites per function, 95% direct (to a function within 30
    of the caller, or with probability 0.3 to a popular one, drawn from a Pareto law) and 5%
    through a function pointer; 3% of the functions have their address taken; the entry
    (function 0) calls 50 functions. Ids of variables and objects share one space."""
    d = os.path.join(DATA, "pointsto-10k")
    os.makedirs(d, exist_ok=True)
    ids = iter(range(1 << 31))
    fn = []
    for _ in range(funcs):
        params = [next(ids) for _ in range(rnd.choice([0, 1, 1, 2, 2, 3]))]
        ret = next(ids) if rnd.random() < 0.6 else None
        local = [next(ids) for _ in range(rnd.randrange(6, 18))]
        objects = [next(ids) for _ in range(rnd.randrange(1, 4))]
        fn.append((params, ret, local, objects, next(ids)))
    names = ["address_of", "assign", "load", "store", "call_site_in", "call_direct", "call_indirect",
             "actual_arg", "formal_param", "actual_return", "formal_return", "func_obj", "entry", "func"]
    rel = {k: set() for k in names}
    sites = iter(range(1 << 31))
    taken = [g for g in range(funcs) if rnd.random() < 0.03]
    for f, (params, ret, local, objects, address) in enumerate(fn):
        rel["func"].add((f,))
        rel["func_obj"].add((f, address))
        rel["formal_param"].update((f, i, p) for i, p in enumerate(params))
        if ret is not None:
            rel["formal_return"].add((f, ret))
        vs = params + ([ret] if ret is not None else []) + local
        rel["address_of"].update((rnd.choice(vs), o) for o in objects)
        for _ in range(rnd.randrange(2, 8)):
            a, b = rnd.choice(vs), rnd.choice(vs)
            if a != b:
                rel["assign"].add((a, b))
        for name in ("load", "store"):
            for _ in range(rnd.randrange(0, 5)):
                rel[name].add((rnd.choice(vs), rnd.choice(vs)))
        if taken and rnd.random() < 0.05:
            rel["address_of"].add((rnd.choice(local), fn[rnd.choice(taken)][4]))
        for _ in range(rnd.randrange(1, 6)):
            c = next(sites)
            rel["call_site_in"].add((c, f))
            if rnd.random() < 0.05:
                rel["call_indirect"].add((c, rnd.choice(local)))
                nargs = 2
            else:
                if rnd.random() < 0.3:
                    g = min(funcs - 1, int(rnd.paretovariate(1.2)) - 1)
                else:
                    g = min(funcs - 1, max(0, f + rnd.randrange(-30, 31)))
                rel["call_direct"].add((c, g))
                nargs = len(fn[g][0])
            rel["actual_arg"].update((c, i, rnd.choice(vs)) for i in range(nargs))
            if rnd.random() < 0.5:
                rel["actual_return"].add((c, rnd.choice(local)))
    rel["entry"].add((0,))
    for _ in range(50):
        c = next(sites)
        rel["call_site_in"].add((c, 0))
        rel["call_direct"].add((c, rnd.randrange(funcs)))
    for name, rows in rel.items():
        with open(os.path.join(d, name + ".tsv"), "w") as f:
            f.writelines("\t".join(map(str, r)) + "\n" for r in sorted(rows))
    return d


def gen_skewed(rnd):
    """20,000 edges whose endpoints follow a Zipf law over 5,000 nodes: hubs make the
    intermediate results of pairwise joins much larger than the triangles found."""
    n = 5000
    weights = [1.0 / (i + 1) ** 1.1 for i in range(n)]
    edges = set()
    while len(edges) < 20000:
        a, b = rnd.choices(range(n), weights=weights, k=2)
        if a != b:
            edges.add((a, b))
    return gen_tc("triangle-skewed-20k", n, edges)


TL_PROGRAMS = {
    "tc": 'Edge = "edge.tsv"\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n',
    "reach": 'Edge = "edge.tsv"\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n',
    "sg": 'Parent = "parent.tsv"\nSg(x, y) :- Parent(x, p), Parent(y, p), x != y.\nSg(x, y) :- Parent(x, a), Sg(a, b), Parent(y, b).\n',
    "andersen": 'AddressOf = "address_of.tsv"\nAssign = "assign.tsv"\nLoad = "load.tsv"\nStore = "store.tsv"\n'
                'PointsTo(y, x) :- AddressOf(y, x).\nPointsTo(y, x) :- Assign(y, z), PointsTo(z, x).\n'
                'PointsTo(y, w) :- Load(y, x), PointsTo(x, z), PointsTo(z, w).\n'
                'PointsTo(z, w) :- Store(y, x), PointsTo(y, z), PointsTo(x, w).\n',
    "pointsto": 'AddressOf = "address_of.tsv"\nAssign = "assign.tsv"\nLoad = "load.tsv"\nStore = "store.tsv"\n'
                'CallSiteIn = "call_site_in.tsv"\nCallDirect = "call_direct.tsv"\nCallIndirect = "call_indirect.tsv"\n'
                'ActualArg = "actual_arg.tsv"\nFormalParam = "formal_param.tsv"\nActualReturn = "actual_return.tsv"\n'
                'FormalReturn = "formal_return.tsv"\nFuncObj = "func_obj.tsv"\nEntry = "entry.tsv"\nFunc = "func.tsv"\n'
                'PointsTo(p, o) :- AddressOf(p, o).\n'
                'PointsTo(p, o) :- Assign(p, q), PointsTo(q, o).\n'
                'PointsTo(p, o) :- Load(p, q), PointsTo(q, r), PointsTo(r, o).\n'
                'PointsTo(r, o) :- Store(p, q), PointsTo(p, r), PointsTo(q, o).\n'
                'CallEdge(c, g) :- CallDirect(c, g).\n'
                'CallEdge(c, g) :- CallIndirect(c, p), PointsTo(p, o), FuncObj(g, o).\n'
                'Param(p, a) :- CallEdge(c, g), ActualArg(c, i, a), FormalParam(g, i, p).\n'
                'Return(r, v) :- CallEdge(c, g), ActualReturn(c, r), FormalReturn(g, v).\n'
                'PointsTo(p, o) :- Param(p, a), PointsTo(a, o).\n'
                'PointsTo(r, o) :- Return(r, v), PointsTo(v, o).\n'
                'Reachable(f) :- Entry(f).\n'
                'Reachable(g) :- Reachable(f), CallSiteIn(c, f), CallEdge(c, g).\n'
                'Dead(f) :- Func(f), not Reachable(f).\n',
    "triangle": 'Edge = "edge.tsv"\nTri(x, y, z) :- Edge(x, y), Edge(y, z), Edge(z, x).\n',
    "strings": 'People = "people.tsv"\nFull(z) :- People(x, y), z = cat(x, " ", y).\n'
               'Long(z) :- Full(z), strlen(z) > 16.\n',
}
OUTPUT = {"tc": "Path", "reach": "Path", "sg": "Sg", "andersen": "PointsTo", "pointsto": "PointsTo", "triangle": "Tri", "strings": "Long"}

# Soufflé programs: the same rules. Soufflé is not in the package registries; the benchmark
# uses a `souffle` on PATH (or $SOUFFLE) and skips it with a message when there is none.
SOUFFLE_INPUTS = {
    "andersen": [("AddressOf", "address_of", 2), ("Assign", "assign", 2), ("Load", "load", 2), ("Store", "store", 2)],
    "pointsto": [("AddressOf", "address_of", 2), ("Assign", "assign", 2), ("Load", "load", 2), ("Store", "store", 2),
                 ("CallSiteIn", "call_site_in", 2), ("CallDirect", "call_direct", 2), ("CallIndirect", "call_indirect", 2),
                 ("ActualArg", "actual_arg", 3), ("FormalParam", "formal_param", 3), ("ActualReturn", "actual_return", 2),
                 ("FormalReturn", "formal_return", 2), ("FuncObj", "func_obj", 2), ("Entry", "entry", 1), ("Func", "func", 1)],
}
SOUFFLE_DERIVED = {
    "andersen": [("PointsTo", 2)],
    "pointsto": [("PointsTo", 2), ("CallEdge", 2), ("Param", 2), ("Return", 2), ("Reachable", 1), ("Dead", 1)],
}


def souffle_program(kind):
    """The tl program's rules in Soufflé's syntax, with its inputs declared and the output's
    size printed."""
    cols = "abcdefgh"
    decl = lambda name, n: ".decl %s(%s)\n" % (name, ", ".join("%s:number" % c for c in cols[:n]))
    text = ""
    for name, file, n in SOUFFLE_INPUTS[kind]:
        text += decl(name, n) + '.input %s(filename="%s.tsv")\n' % (name, file)
    for name, n in SOUFFLE_DERIVED[kind]:
        text += decl(name, n)
    text += ".printsize %s\n" % OUTPUT[kind]
    for line in TL_PROGRAMS[kind].splitlines():
        if ":-" in line:
            text += line.replace(" not ", " !") + "\n"
    return text


def souffle_rows(d, kind):
    """Rows for Soufflé interpreted (one and two threads) and compiled (excluding the C++
    compilation), or one row saying why it was skipped."""
    exe = os.environ.get("SOUFFLE") or shutil.which("souffle")
    if not exe:
        return {"souffle": (None, None, "skipped: no souffle on PATH (build it from source; it is not in the registries)")}
    dl = os.path.join(d, "bench.dl")
    with open(dl, "w") as f:
        f.write(souffle_program(kind))
    rows = {}
    count = lambda out: int(out.split()[-1]) if out and out.split() else out
    for j in ("1", "2"):
        wall, rss, out = timed([exe, "-F", d, "-j", j, dl])
        rows["souffle interpreted -j%s" % j] = (wall, rss, count(out) if wall is not None else out)
    binary = os.path.join(d, "souffle-bench")
    built = subprocess.run([exe, "-F", d, "-o", binary, dl], capture_output=True, text=True)
    if built.returncode != 0:
        rows["souffle compiled"] = (None, None, "compilation failed")
        return rows
    for j in ("1", "2"):
        wall, rss, out = timed([binary, "-F", d, "-j", j])
        rows["souffle compiled -j%s" % j] = (wall, rss, count(out) if wall is not None else out)
    return rows


DUCKDB = {
    "tc": "WITH RECURSIVE path(x, y) AS (SELECT x, y FROM edge UNION SELECT path.x, edge.y FROM path JOIN edge ON path.y = edge.x) SELECT count(*) FROM path",
    "sg": "WITH RECURSIVE sg(x, y) AS (SELECT a.x, b.x FROM parent a JOIN parent b ON a.y = b.y WHERE a.x <> b.x "
          "UNION SELECT a.x, b.x FROM parent a JOIN sg ON a.y = sg.x JOIN parent b ON b.y = sg.y) SELECT count(*) FROM sg",
    "triangle": "SELECT count(*) FROM edge e1 JOIN edge e2 ON e1.y = e2.x JOIN edge e3 ON e2.y = e3.x AND e3.y = e1.x",
    "reach": "WITH RECURSIVE r(y) AS (SELECT y FROM edge WHERE x = 0 UNION SELECT edge.y FROM r JOIN edge ON r.y = edge.x) SELECT count(*) FROM r",
    "strings": "SELECT count(*) FROM (SELECT DISTINCT x || ' ' || y AS z FROM people) WHERE length(z) > 16",
}
DUCKDB_TABLES = {"tc": ["edge"], "sg": ["parent"], "triangle": ["edge"], "reach": ["edge"], "strings": ["people"]}
DUCKDB_COLUMNS = {"strings": "VARCHAR"}
# Workloads the ascent-bench crate does not implement.
NO_ASCENT = {"strings": "not in ascent-bench"}

DUCKDB_SCRIPT = r'''
import sys, time, duckdb
d, threads, query, tables, ty = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5]
con = duckdb.connect()
con.execute("PRAGMA threads=%s" % threads)
con.execute("SET enable_progress_bar = false")
t0 = time.perf_counter()
for t in tables:
    con.execute("CREATE TABLE %s AS SELECT * FROM read_csv('%s/%s.tsv', delim='\t', header=false, columns={'x': '%s', 'y': '%s'})" % (t, d, t, ty, ty))
n = con.execute(query).fetchone()[0]
print(n, time.perf_counter() - t0)
'''


def timed(cmd, cwd=None):
    """Wall seconds, peak RSS MiB and stdout of a process (None on failure or timeout)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, None, "timeout"
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return None, None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"
    rss = int(p.stderr.strip().splitlines()[-1]) / 1024
    return wall, rss, p.stdout


def count_lines(path):
    with open(path) as f:
        return sum(1 for _ in f)


def setup():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=os.path.join(HERE, "ascent-bench"), check=True)
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", "duckdb"], check=True)
    return py


def main():
    py = setup()
    chosen = sys.argv[1:] or list(workloads())
    rows = []
    for name, (kind, gen) in workloads().items():
        if name not in chosen:
            continue
        d = gen()
        prog = os.path.join(d, "bench.tl")
        with open(prog, "w") as f:
            f.write(TL_PROGRAMS[kind])
        check = os.path.join(d, "check.tl")
        with open(check, "w") as f:
            f.write(TL_PROGRAMS[kind] + '"out.tsv" = %s\n' % OUTPUT[kind])
        result = {}
        if kind == "reach":
            result["tl"] = timed([TL, "query", prog, "Path(0, x)", "--threads", "1"])
            wall, rss, out = result["tl"]
            result["tl"] = (wall, rss, len(out.splitlines()) if wall else out)
            # The same bound query written in the program: `tl run` answers it by demand.
            asked = os.path.join(d, "asked.tl")
            with open(asked, "w") as f:
                f.write(TL_PROGRAMS[kind] + "Path(0, x)?\n")
            wall, rss, out = timed([TL, "run", asked, "--threads", "1"])
            result["tl run, `Path(0, x)?` in the file"] = (wall, rss, len(out.splitlines()) if wall else out)
            # Through negation: `not Path(y, 0)` is answered by its own demand.
            negated = os.path.join(d, "negated.tl")
            with open(negated, "w") as f:
                f.write(TL_PROGRAMS[kind] + "OneWay(s, y) :- Path(s, y), not Path(y, s).\n")
            wall, rss, out = timed([TL, "query", negated, "OneWay(0, x)", "--threads", "1"])
            result["tl query `OneWay(0, x)` (through not)"] = (wall, rss, len(out.splitlines()) if wall else out)
            full = timed([TL, "run", prog, "--threads", "1"])
            result["tl full closure"] = (full[0], full[1], "-")
        else:
            wall, rss, out = timed([TL, "run", prog, "--threads", "1"])
            n = out
            if wall is not None:
                ok = timed([TL, "run", check, "--threads", "1"])
                n = count_lines(os.path.join(d, "out.tsv")) if ok[0] is not None else ok[2]
            result["tl"] = (wall, rss, n)
            wall2, rss2, _ = timed([TL, "run", prog, "--threads", "2"])
            result["tl --threads 2"] = (wall2, rss2, n)
        for label, extra in [("ascent", []), ("ascent_par", ["par"])]:
            if kind in NO_ASCENT:
                result[label] = (None, None, NO_ASCENT[kind])
                continue
            wall, rss, out = timed([ASCENT, kind, d] + extra)
            result[label] = (wall, rss, int(out) if wall is not None else out)
        if kind in SOUFFLE_INPUTS:
            result.update(souffle_rows(d, kind))
        if kind in DUCKDB:
            ty = DUCKDB_COLUMNS.get(kind, "UINTEGER")
            wall, rss, out = timed([py, "-c", DUCKDB_SCRIPT, d, "2", DUCKDB[kind], ",".join(DUCKDB_TABLES[kind]), ty])
            if wall is not None:
                n, inproc = out.strip().splitlines()[-1].split()
                result["duckdb (2 threads)"] = (float(inproc), rss, int(n))
            else:
                result["duckdb (2 threads)"] = (None, None, out)
        else:
            result["duckdb (2 threads)"] = (None, None, "not expressible as a recursive CTE (non-linear recursion)")
        rows.append((name, result))
        print_table(rows)


def print_table(rows):
    lines = ["| workload | system | wall s | tl / system | peak MiB | tuples |", "|---|---|---|---|---|---|"]
    for name, result in rows:
        tl = result["tl"][0]
        for system, (wall, rss, n) in result.items():
            ratio = "%.2f" % (tl / wall) if (tl and wall) else "-"
            lines.append("| %s | %s | %s | %s | %s | %s |" % (
                name, system, "%.2f" % wall if wall is not None else "-", ratio,
                "%.0f" % rss if rss is not None else "-", n))
    print("\n".join(lines), flush=True)
    print()


if __name__ == "__main__":
    main()
