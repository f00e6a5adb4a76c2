"""The Python peer of `cargo bench --bench incremental`: DuckDB evaluating again from scratch
after each commit, in process (the tables stay loaded; each commit changes them, then the
query runs whole), on the same workloads and commits as the bench.

- The 2,000-node chain closure (a recursive CTE, as `bench/datalog/run.py`'s `tc`).
- Single-source shortest paths over 100,000 nodes and 400,000 weighted edges (the bench's
  seeded `w.tsv`), as a recursive CTE keyed on the node (`USING KEY`, DuckDB 1.3), each round
  keeping a node's best distance.
- Andersen's points-to analysis is not a linear recursion, which recursive CTEs cannot state.

    python3 bench/incremental/duckdb_rerun.py   # installs duckdb into bench/.venv

Prints one line per commit: milliseconds to apply the commit and run the query again.
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(os.path.dirname(HERE), ".venv")
NODES = 2000
SSSP_NODES = 100_000
MASK = (1 << 64) - 1


def xorshift(seed):
    """The bench's seeded generator (`benches/incremental.rs`)."""
    state = seed

    def next_():
        nonlocal state
        state ^= (state << 13) & MASK
        state ^= state >> 7
        state ^= (state << 17) & MASK
        return state

    return next_


def random_edge(next_, nodes):
    a = next_() % nodes
    return a, next_() % nodes


TC = ("WITH RECURSIVE path(x, y) AS (SELECT x, y FROM edge UNION "
      "SELECT path.x, edge.y FROM path JOIN edge ON path.y = edge.x) SELECT count(*) FROM path")

SSSP = ("WITH RECURSIVE dist(node, d) USING KEY (node) AS ("
        "SELECT b, min(w) FROM w WHERE a = 0 GROUP BY b "
        "UNION "
        "SELECT w.b, min(dist.d + w.w) FROM dist JOIN w ON dist.node = w.a "
        "LEFT JOIN recurring.dist AS best ON best.node = w.b "
        "GROUP BY w.b HAVING min(dist.d + w.w) < coalesce(min(best.d), 1e18)"
        ") SELECT count(*), sum(d) FROM dist")


def timed(con, label, change, query):
    t0 = time.perf_counter()
    for sql, args in change:
        con.execute(sql, args)
    out = con.execute(query).fetchone()
    print(f"{label}: {(time.perf_counter() - t0) * 1e3:.1f} ms {out}", flush=True)


def chain(duckdb):
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("CREATE TABLE edge (x INTEGER, y INTEGER)")
    con.executemany("INSERT INTO edge VALUES (?, ?)", [(i, i + 1) for i in range(NODES - 1)])
    ins = "INSERT INTO edge VALUES (?, ?)"
    rm = "DELETE FROM edge WHERE x = ? AND y = ?"
    timed(con, "from scratch", [], TC)
    timed(con, f"insert Edge({NODES - 1}, {NODES})", [(ins, [NODES - 1, NODES])], TC)
    timed(con, f"remove Edge({NODES - 1}, {NODES})", [(rm, [NODES - 1, NODES])], TC)
    timed(con, "remove Edge(1000, 1001)", [(rm, [1000, 1001])], TC)
    timed(con, "insert Edge(1000, 1001)", [(ins, [1000, 1001])], TC)
    next_ = xorshift(0x2545_F491_4F6C_DD1D)
    forward = set()
    while len(forward) < 1000:
        a, b = random_edge(next_, NODES)
        lo, hi = min(a, b), max(a, b)
        if hi > lo + 1:
            forward.add((lo, hi))
    forward = sorted(forward)
    timed(con, "insert 1,000 random forward edges", [(ins, list(e)) for e in forward], TC)
    timed(con, "remove them", [(rm, list(e)) for e in forward], TC)


def sssp(duckdb):
    next_ = xorshift(0x5151_2026_1203_0001)
    edges = {}
    while len(edges) < 400_000:
        a, b = random_edge(next_, SSSP_NODES)
        if a != b:
            edges[(a, b)] = next_() % 99 + 1
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.tsv")
        with open(path, "w") as f:
            f.writelines(f"{a}\t{b}\t{w}\n" for (a, b), w in sorted(edges.items()))
        con.execute(f"CREATE TABLE w AS SELECT * FROM read_csv('{path}', delim='\t', header=false, "
                    "columns={'a': 'INTEGER', 'b': 'INTEGER', 'w': 'BIGINT'})")
    rm = "DELETE FROM w WHERE a = ? AND b = ?"
    ins = "INSERT INTO w VALUES (?, ?, ?)"
    timed(con, "from scratch", [], SSSP)
    timed(con, "set W(0, 99) = 1", [(rm, [0, 99]), (ins, [0, 99, 1])], SSSP)
    timed(con, "remove W(0, 99)", [(rm, [0, 99])], SSSP)


def main():
    py = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
            subprocess.run([py, "-m", "pip", "install", "--quiet", "duckdb"], check=True)
        os.execv(py, [py, __file__] + sys.argv[1:])
    import duckdb

    print(f"duckdb {duckdb.__version__}, {os.cpu_count()} threads")
    print("chain closure:")
    chain(duckdb)
    print("shortest paths:")
    sssp(duckdb)


if __name__ == "__main__":
    main()
