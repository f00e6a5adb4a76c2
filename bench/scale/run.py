#!/usr/bin/env python3
"""The scale benchmark: the paper's programs as a user writes them, at sizes where the
kernel chosen matters, against the library a user would otherwise pick (PyTorch CPU, NumPy,
SciPy), in one invocation and on the same threads.

    python3 bench/scale/run.py [--threads N] [--only NAME]

Builds target/release/tl, installs numpy, scipy and torch into bench/.venv, writes the data
under bench/scale/data/ (seeded), and prints a Markdown table: tl's evaluation time
(`tl bench`, evaluation only, best of several runs), the peer's (in-process, best of
several), their ratio, and for the sparse count the peak memory of `tl bench`. tl's
parameters are initialised from its seed and the peers' from theirs: the values differ, the
work does not."""
import os, random, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(HERE, "data")
VENV = os.path.join(ROOT, "bench", ".venv")
TL = os.path.join(ROOT, "target", "release", "tl")


def edges(name, nodes, count, seed, weighted=False):
    """`count` distinct random directed edges among `nodes` nodes, sorted, as a TSV."""
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        rng = random.Random(seed)
        out = {}
        while len(out) < count:
            out[(rng.randrange(nodes), rng.randrange(nodes))] = round(rng.random(), 4)
        with open(path, "w") as f:
            for (a, b), w in sorted(out.items()):
                f.write(f"{a}\t{b}\t{w}\n" if weighted else f"{a}\t{b}\n")
    return path


def observations(name, steps, symbols, seed):
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        rng = random.Random(seed)
        with open(path, "w") as f:
            for t in range(steps):
                f.write(f"{t}\t{rng.randrange(symbols)}\n")
    return path


def kg(name, entities, relations, facts, seed):
    """Known triples (head, relation, tail) and held-out ones, disjoint."""
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        rng = random.Random(seed)
        out = set()
        while len(out) < facts:
            out.add((rng.randrange(entities), rng.randrange(relations), rng.randrange(entities)))
        with open(path, "w") as f:
            for h, r, t in sorted(out):
                f.write(f"{h}\t{r}\t{t}\n")
    return path


GNN = """Nodes : 20000
D : 64
Layers : 2
Neig : bool[Nodes, Nodes]
Neig = "edges_20k.tsv"
X : real[Nodes, D]
X ~ normal(0, 1)
WP : real[Layers, D, D]
WP ~ normal(0, 0.1)
{weights}
Emb[n, 0, d] = X[n, d]
Z[n, l, d] = relu(WP[l, d, e] Emb[n, l, e])
Agg[n, l, d] = Neig(n, m) Z[m, l, d]
{update}
"""
GNN_MATRIX = GNN.format(
    weights="WAgg : real[Layers, D, D]\nWAgg ~ normal(0, 0.1)\nWSelf : real[Layers, D, D]\n"
            "WSelf ~ normal(0, 0.1)",
    update="Emb[n, l + 1, d] = relu(WAgg[l, d, e] Agg[n, l, e] + WSelf[l, d, e] Emb[n, l, e])")
GNN_SCALAR = GNN.format(
    weights="WAgg = 0.5\nWSelf = 0.25",
    update="Emb[n, l + 1, d] = relu(WAgg Agg[n, l, d] + WSelf Emb[n, l, d])")
TORCH_GNN = ("e = torch.tensor(np.loadtxt(DATA + '/edges_20k.tsv', dtype=np.int64)); "
             "a = torch.sparse_coo_tensor(e.T, torch.ones(len(e)), (20000, 20000)).coalesce().to_sparse_csr(); "
             "x = trnd((20000, 64)); wp = trnd((2, 64, 64)) * 0.1; wa = trnd((2, 64, 64)) * 0.1; "
             "ws = trnd((2, 64, 64)) * 0.1")

RNN = """H : 64
T : 10000
W : real[H, H]
V : real[H, H]
U : real[H, T]
W ~ normal(0, 0.1)
V ~ normal(0, 0.1)
U ~ normal(0, 1)
{eq}
"""

HMM = """S : 64
O : 32
T : 10000
Obs : bool[T, O]
Obs = "obs_10k.tsv"
Trans : real[S, S]
Trans ~ uniform(0, 0.015625)
Emit : real[S, O]
Emit ~ uniform(0.5, 1.5)
Init : real[S]
Init ~ uniform(0, 1)
{eqs}
"""
HMM_FORWARD = HMM.format(eqs="Alpha[0, s] = Init[s] Emit[s, o] Obs(0, o)\n"
                             "Alpha[t + 1, s] = Alpha[t, r] Trans[r, s] Emit[s, o] Obs(t + 1, o)")
HMM_VITERBI = HMM.format(eqs="E[t, s] = Emit[s, o] Obs(t, o)\nDelta[0, s] max= Init[s] E[0, s]\n"
                             "Delta[t + 1, s] max= Delta[t, r] Trans[r, s] E[t + 1, s]")
NUMPY_HMM = ("obs = np.loadtxt(DATA + '/obs_10k.tsv', dtype=np.int64)[:, 1]; "
             "trans = rng.uniform(0, 1 / 64, (64, 64)).astype(np.float32); "
             "emit = rng.uniform(0.5, 1.5, (64, 32)).astype(np.float32); "
             "init = rng.uniform(0, 1, 64).astype(np.float32)")

KG = """Entity : 1000
Relation : 20
D : 64
Emb : real[Entity, D]
Emb ~ normal(0, 0.3)
W : real[Relation, D, D]
W ~ normal(0, 0.3)
Known : bool[Entity, Relation, Entity]
Known = "kg_known.tsv"
Held : bool[Entity, Relation, Entity]
Held = "kg_held.tsv"
Score[r, x, y] = W[r, i, j] Emb[x, i] Emb[y, j]
Better[x, r, y] = Held(x, r, y) (Score[r, x, z] > Score[r, x, y]) (1 - Known[x, r, z])
Count = Held(x, r, y)
MRR = Held(x, r, y) / (1 + Better[x, r, y]) / Count
"""
TORCH_KG = ("known = torch.tensor(np.loadtxt(DATA + '/kg_known.tsv', dtype=np.int64)); "
            "held = torch.tensor(np.loadtxt(DATA + '/kg_held.tsv', dtype=np.int64)); "
            "mask = torch.zeros(20, 1000, 1000, dtype=torch.bool); "
            "mask[known[:, 1], known[:, 0], known[:, 2]] = True; "
            "emb = trnd((1000, 64)) * 0.3; w = trnd((20, 64, 64)) * 0.3")
TORCH_KG_OP = ("score = torch.einsum('rij,xi,yj->rxy', w, emb, emb); "
               "s = score[held[:, 1], held[:, 0]]; "
               "true = s.gather(1, held[:, 2:3]); "
               "better = ((s > true) & ~mask[held[:, 1], held[:, 0]]).sum(1); "
               "mrr = (1.0 / (1 + better.float())).mean()")

# name: (tl program, data writers, peer kind, peer setup, peer operation)
# The weighted rows' data and PyTorch peer, shared by the programs with and without `W`'s
# declaration.
WEIGHTED_PEER = (
    [lambda: edges("weighted_20k.tsv", 20000, 100000, 8, weighted=True)], "torch",
    "e = np.loadtxt(DATA + '/weighted_20k.tsv'); "
    "a = torch.sparse_coo_tensor(torch.tensor(e[:, :2].T, dtype=torch.int64), "
    "torch.tensor(e[:, 2], dtype=torch.float32), (20000, 20000)).coalesce().to_sparse_csr(); "
    "z = trnd((20000, 64))",
    "torch.sparse.mm(a, z)")

WORKLOADS = {
    "GNN (Table 1), 20k nodes, 100k edges, d=64, L=2, matrix weights": (
        GNN_MATRIX, [lambda: edges("edges_20k.tsv", 20000, 100000, 7)], "torch", TORCH_GNN,
        "emb = x\nfor l in range(2):\n    z = torch.relu(emb @ wp[l].T); agg = torch.sparse.mm(a, z)\n"
        "    emb = torch.relu(agg @ wa[l].T + emb @ ws[l].T)"),
    "GNN (Table 1), scalar layer weights": (
        GNN_SCALAR, [lambda: edges("edges_20k.tsv", 20000, 100000, 7)], "torch", TORCH_GNN,
        "emb = x\nfor l in range(2):\n    z = torch.relu(emb @ wp[l].T); agg = torch.sparse.mm(a, z)\n"
        "    emb = torch.relu(0.5 * agg + 0.25 * emb)"),
    "attention 8x512x64, / sqrt(Dk)": (
        "H : 8\nP : 512\nD : 64\nDk = 64\nQ : real[H, P, D]\nK : real[H, P, D]\nV : real[H, P, D]\n"
        "Comp[h, p, q.] = softmax(Q[h, p, d] K[h, q, d] / sqrt(Dk))\n"
        "Attn[h, p, d] = Comp[h, p, q] V[h, q, d]\n", [], "torch",
        "q = trnd((8, 512, 64)); k = trnd((8, 512, 64)); v = trnd((8, 512, 64))",
        "(q @ k.transpose(1, 2) / 8).softmax(-1) @ v"),
    "attention 8x512x64, / 8": (
        "H : 8\nP : 512\nD : 64\nQ : real[H, P, D]\nK : real[H, P, D]\nV : real[H, P, D]\n"
        "Comp[h, p, q.] = softmax(Q[h, p, d] K[h, q, d] / 8)\n"
        "Attn[h, p, d] = Comp[h, p, q] V[h, q, d]\n", [], "torch",
        "q = trnd((8, 512, 64)); k = trnd((8, 512, 64)); v = trnd((8, 512, 64))",
        "(q @ k.transpose(1, 2) / 8).softmax(-1) @ v"),
    "RNN, 10,000 steps, 64 units, virtual index": (
        RNN.format(eq="State[i, *t + 1] = tanh(W[i, j] State[j, *t] + V[i, k] U[k, t])"), [],
        "torch", "w = trnd((64, 64)) * 0.1; v = trnd((64, 64)) * 0.1; u = trnd((64, 10000))",
        "s = torch.zeros(64)\nfor t in range(10000): s = torch.tanh(w @ s + v @ u[:, t])"),
    "RNN, 10,000 steps, 64 units, index recursion": (
        RNN.format(eq="State[i, t + 1] = tanh(W[i, j] State[j, t] + V[i, k] U[k, t])"), [],
        "torch", "w = trnd((64, 64)) * 0.1; v = trnd((64, 64)) * 0.1; u = trnd((64, 10000))",
        "st = torch.zeros(64, 10001)\nfor t in range(10000): st[:, t + 1] = torch.tanh(w @ st[:, t] + v @ u[:, t])"),
    "HMM forward, 64 states, 10,000 observations": (
        HMM_FORWARD, [lambda: observations("obs_10k.tsv", 10000, 32, 11)], "numpy", NUMPY_HMM,
        "alpha = np.empty((10000, 64), np.float32); alpha[0] = init * emit[:, obs[0]]\n"
        "for t in range(9999): alpha[t + 1] = (alpha[t] @ trans) * emit[:, obs[t + 1]]"),
    "HMM Viterbi (max-product), 64 states, 10,000 observations": (
        HMM_VITERBI, [lambda: observations("obs_10k.tsv", 10000, 32, 11)], "numpy", NUMPY_HMM,
        "delta = np.empty((10000, 64), np.float32); delta[0] = init * emit[:, obs[0]]\n"
        "for t in range(9999): delta[t + 1] = (delta[t][:, None] * trans).max(0) * emit[:, obs[t + 1]]"),
    "weighted sparse x dense, 100k entries x 64": (
        "Nodes : 20000\nD : 64\nW = \"weighted_20k.tsv\"\nZ : real[Nodes, D]\nZ ~ normal(0, 1)\n"
        "Agg[n, d] = W[n, m] Z[m, d]\n",
        *WEIGHTED_PEER),
    "weighted sparse x dense, declared W : real[Nodes, Nodes], 100k entries x 64": (
        "Nodes : 20000\nD : 64\nW : real[Nodes, Nodes]\nW = \"weighted_20k.tsv\"\nZ : real[Nodes, D]\n"
        "Z ~ normal(0, 1)\nAgg[n, d] = W[n, m] Z[m, d]\n",
        *WEIGHTED_PEER),
    "count Two[n, k] = Edge(n, m) Edge(m, k), 20k nodes, 100k edges": (
        "Nodes : 20000\nEdge : bool[Nodes, Nodes]\nEdge = \"edges_20k.tsv\"\n"
        "Two[n, k] = Edge(n, m) Edge(m, k)\n",
        [lambda: edges("edges_20k.tsv", 20000, 100000, 7)], "numpy",
        "import scipy.sparse as sp; e = np.loadtxt(DATA + '/edges_20k.tsv', dtype=np.int64); "
        "a = sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(20000, 20000))",
        "b = a @ a"),
    "KG filtered ranking (MRR), 1,000 entities x 20 relations, d=64": (
        KG, [lambda: kg("kg_known.tsv", 1000, 20, 20000, 3), lambda: kg("kg_held.tsv", 1000, 20, 2000, 4)],
        "torch", TORCH_KG, TORCH_KG_OP),
}

PEER = r'''
import sys, time, numpy as np
DATA = sys.argv[4]
rng = np.random.default_rng(0)
rnd = lambda shape: rng.standard_normal(shape).astype(np.float32)
exec(sys.argv[1])
times = []
for _ in range(int(sys.argv[3])):
    t0_ = time.perf_counter(); exec(sys.argv[2]); times.append(time.perf_counter() - t0_)
print(min(times) * 1e3)
'''

TORCH_PEER = r'''
import sys, time, numpy as np, torch
DATA = sys.argv[4]
torch.set_num_threads(int(sys.argv[5]))
gen = torch.Generator().manual_seed(0)
trnd = lambda shape: torch.randn(shape, generator=gen)
exec(sys.argv[1])
times = []
with torch.no_grad():
    for _ in range(int(sys.argv[3])):
        t0_ = time.perf_counter(); exec(sys.argv[2]); times.append(time.perf_counter() - t0_)
print(min(times) * 1e3)
'''


def setup(torch):
    """Builds tl and the peers' environment; PyTorch (a large download) only where a chosen
    workload runs it."""
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    packages = ["numpy", "scipy"] + (["torch"] if torch else [])
    subprocess.run([py, "-m", "pip", "install", "--quiet"] + packages, check=True)
    return py


def tl_time(path, threads, repeat):
    """tl's best evaluation time in ms, and its peak resident memory in MiB."""
    out = subprocess.run(["/usr/bin/time", "-f", "%M", TL, "bench", path, "--repeat", str(repeat),
                          "--threads", threads], capture_output=True, text=True, check=True)
    ms = float(out.stdout.split("min ")[1].split(" ms")[0])
    kib = int(out.stderr.strip().splitlines()[-1])
    return ms, kib / 1024


def main():
    threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    chosen = {n: w for n, w in WORKLOADS.items() if not only or only in n}
    py = setup(any(w[2] == "torch" for w in chosen.values()))
    os.makedirs(DATA, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
               MKL_NUM_THREADS=threads)
    print("| workload | tl ms | peer | peer ms | tl / peer | tl peak MiB |")
    print("|---|---|---|---|---|---|")
    for name, (program, writers, kind, init, op) in chosen.items():
        for w in writers:
            w()
        path = os.path.join(DATA, "".join(c if c.isascii() and c.isalnum() else "_" for c in name)[:60] + ".tl")
        with open(path, "w") as f:
            f.write(program)
        tl, peak = tl_time(path, threads, 5)
        script = TORCH_PEER if kind == "torch" else PEER
        args = [py, "-c", script, init, op, "5", DATA] + ([threads] if kind == "torch" else [])
        peer = float(subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout)
        label = {"torch": "PyTorch", "numpy": "NumPy/SciPy"}[kind]
        print("| %s | %.2f | %s | %.2f | %.2f | %.0f |" % (name, tl, label, peer, tl / peer, peak),
              flush=True)


if __name__ == "__main__":
    main()
