#!/usr/bin/env python3
"""The dense benchmark: `tl bench` (evaluation only, in-process) against NumPy /
opt_einsum and PyTorch eager on CPU (in-process) on the same shapes, in one invocation.

    python3 bench/dense/run.py [--threads N] [--only SUBSTRING]

Builds target/release/tl, installs numpy, opt_einsum and torch into bench/.venv, writes the programs
under bench/dense/data/, and prints a Markdown table of the best of several runs. tl's
parameters are initialised from its seed and the peers' from NumPy's: the values differ, the
work does not."""
import os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(HERE, "data")
VENV = os.path.join(ROOT, "bench", ".venv")
TL = os.path.join(ROOT, "target", "release", "tl")

WORKLOADS = {
    "matmul 1024³": ("N : 1024\nA : real[N, N]\nB : real[N, N]\nC[i, k] = A[i, j] B[j, k]\n",
                     "a = rnd((1024, 1024)); b = rnd((1024, 1024))", "a @ b", 2 * 1024 ** 3),
    "matmul 2048³": ("N : 2048\nA : real[N, N]\nB : real[N, N]\nC[i, k] = A[i, j] B[j, k]\n",
                     "a = rnd((2048, 2048)); b = rnd((2048, 2048))", "a @ b", 2 * 2048 ** 3),
    "pi,qj,ijkl,rk,sl->pqrs N=10": (
        "N : 10\nC : real[N, N]\nI : real[N, N, N, N]\n"
        "Y[p, q, r, s] = C[p, i] C[q, j] I[i, j, k, l] C[r, k] C[s, l]\n",
        "c = rnd((10, 10)); i = rnd((10, 10, 10, 10))",
        "oe.contract('pi,qj,ijkl,rk,sl->pqrs', c, c, i, c, c)", None),
    "pi,qj,ijkl,rk,sl->pqrs N=30": (
        "N : 30\nC : real[N, N]\nI : real[N, N, N, N]\n"
        "Y[p, q, r, s] = C[p, i] C[q, j] I[i, j, k, l] C[r, k] C[s, l]\n",
        "c = rnd((30, 30)); i = rnd((30, 30, 30, 30))",
        "oe.contract('pi,qj,ijkl,rk,sl->pqrs', c, c, i, c, c)", None),
    "MLP 784-512-512-10, batch 256": (
        "B : 256\nX : real[B, 784]\nW1 : real[512, 784]\nB1 : real[512]\nW2 : real[512, 512]\n"
        "B2 : real[512]\nW3 : real[10, 512]\nB3 : real[10]\n"
        "H1[b, h] = relu(W1[h, i] X[b, i] + B1[h])\nH2[b, h] = relu(W2[h, i] H1[b, i] + B2[h])\n"
        "Out[b, o] = W3[o, h] H2[b, h] + B3[o]\n",
        "x = rnd((256, 784)); w1 = rnd((512, 784)); b1 = rnd(512); w2 = rnd((512, 512)); "
        "b2 = rnd(512); w3 = rnd((10, 512)); b3 = rnd(10)",
        "(np.maximum(np.maximum(x @ w1.T + b1, 0) @ w2.T + b2, 0)) @ w3.T + b3", None),
    "attention 8 heads, 512 positions, d=64": (
        "H : 8\nP : 512\nD : 64\nQ : real[H, P, D]\nK : real[H, P, D]\nV : real[H, P, D]\n"
        "Comp[h, p, q.] = softmax(Q[h, p, d] K[h, q, d] / 8)\nAttn[h, p, d] = Comp[h, p, q] V[h, q, d]\n",
        "q = rnd((8, 512, 64)); k = rnd((8, 512, 64)); v = rnd((8, 512, 64))",
        "s = q @ k.transpose(0, 2, 1) / 8; s = np.exp(s - s.max(-1, keepdims=True)); "
        "s /= s.sum(-1, keepdims=True); s @ v", None),
    "GNN aggregation, 100k edges, 20k nodes, d=64": (
        "Nodes : 20000\nD : 64\nNeig : bool[Nodes, Nodes]\nNeig = \"gnn_edges.tsv\"\n"
        "Z : real[Nodes, D]\nAgg[n, d] = Neig(n, m) Z[m, d]\n",
        "e = np.loadtxt(DATA + '/gnn_edges.tsv', dtype=np.int64); z = rnd((20000, 64))",
        "out = np.zeros((20000, 64), np.float32); np.add.at(out, e[:, 0], z[e[:, 1]])", None),
    "conv 3x3, 32->64 channels, 32x32 output, batch 8": (
        "B : 8\nC : 32\nO : 64\nX : 32\nIn : real[B, C, 34, 34]\nW : real[O, C, 3, 3]\n"
        "Out[b, o, x, y] = W[o, c, dx, dy] In[b, c, x + dx, y + dy]\n",
        "x = rnd((8, 32, 34, 34)); w = rnd((64, 32, 3, 3)); "
        "from numpy.lib.stride_tricks import sliding_window_view as win",
        "np.einsum('ocij,bcxyij->boxy', w, win(x, (3, 3), axis=(2, 3)), optimize=True)",
        2 * 8 * 64 * 32 * 32 * 32 * 9),
    "1,000 tiny equations (4-element vectors)": (
        "X0 = [1, 2, 3, 4]\n" + "".join("X%d[i] = 0.5 X%d[i] + 1\n" % (k + 1, k) for k in range(1000)),
        "x = rnd(4)",
        "y = x\nfor _ in range(1000): y = 0.5 * y + 1", None),
}

# The same operations in PyTorch eager (torch.einsum finds its path with opt_einsum).
TORCH = {
    "matmul 1024³": ("a = trnd((1024, 1024)); b = trnd((1024, 1024))", "a @ b"),
    "matmul 2048³": ("a = trnd((2048, 2048)); b = trnd((2048, 2048))", "a @ b"),
    "pi,qj,ijkl,rk,sl->pqrs N=10": ("c = trnd((10, 10)); i = trnd((10, 10, 10, 10))",
                                    "torch.einsum('pi,qj,ijkl,rk,sl->pqrs', c, c, i, c, c)"),
    "pi,qj,ijkl,rk,sl->pqrs N=30": ("c = trnd((30, 30)); i = trnd((30, 30, 30, 30))",
                                    "torch.einsum('pi,qj,ijkl,rk,sl->pqrs', c, c, i, c, c)"),
    "MLP 784-512-512-10, batch 256": (
        "x = trnd((256, 784)); w1 = trnd((512, 784)); b1 = trnd(512); w2 = trnd((512, 512)); "
        "b2 = trnd(512); w3 = trnd((10, 512)); b3 = trnd(10); F = torch.nn.functional",
        "F.linear(torch.relu(F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2)), w3, b3)"),
    "attention 8 heads, 512 positions, d=64": (
        "q = trnd((8, 512, 64)); k = trnd((8, 512, 64)); v = trnd((8, 512, 64))",
        "(q @ k.transpose(1, 2) / 8).softmax(-1) @ v"),
    "GNN aggregation, 100k edges, 20k nodes, d=64": (
        "e = torch.tensor(np.loadtxt(DATA + '/gnn_edges.tsv', dtype=np.int64)); "
        "a = torch.sparse_coo_tensor(e.T, torch.ones(len(e)), (20000, 20000)).coalesce(); "
        "z = trnd((20000, 64))",
        "torch.sparse.mm(a, z)"),
    "conv 3x3, 32->64 channels, 32x32 output, batch 8": (
        "x = trnd((8, 32, 34, 34)); w = trnd((64, 32, 3, 3))",
        "torch.nn.functional.conv2d(x, w)"),
    "1,000 tiny equations (4-element vectors)": (
        "x = trnd(4)", "y = x\nfor _ in range(1000): y = 0.5 * y + 1"),
}

PEER = r'''
import sys, time, numpy as np, opt_einsum as oe
DATA = sys.argv[4]
rng = np.random.default_rng(0)
rnd = lambda shape: rng.standard_normal(shape).astype(np.float32)
exec(sys.argv[1])
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter(); exec(sys.argv[2]); times.append(time.perf_counter() - t)
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
        t = time.perf_counter(); exec(sys.argv[2]); times.append(time.perf_counter() - t)
print(min(times) * 1e3)
'''


def write_gnn_edges():
    """100,000 distinct random directed edges among 20,000 nodes (seeded)."""
    path = os.path.join(DATA, "gnn_edges.tsv")
    if os.path.exists(path):
        return
    import random
    rng = random.Random(7)
    edges = set()
    while len(edges) < 100_000:
        edges.add((rng.randrange(20000), rng.randrange(20000)))
    with open(path, "w") as f:
        for a, b in sorted(edges):
            f.write(f"{a}\t{b}\n")


def gemm_direct(threads):
    """The gemm crate's own time for the square f32 products (benches/gemm_direct.rs), the
    baseline of the matmul rows' overhead."""
    out = subprocess.run(["cargo", "bench", "--quiet", "--bench", "gemm_direct", "--", "1024", "2048",
                          "--threads", threads], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    times = dict(line.split() for line in out.splitlines() if line.strip())
    return {"matmul %s³" % n: float(ms) for n, ms in times.items()}


def setup():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", "numpy", "opt_einsum", "torch"],
                   check=True)
    return py


def main():
    threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    workloads = {k: v for k, v in WORKLOADS.items() if only in k}
    py = setup()
    os.makedirs(DATA, exist_ok=True)
    write_gnn_edges()
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    direct = gemm_direct(threads) if any(k.startswith("matmul") for k in workloads) else {}
    print("| workload | tl ms | numpy/opt_einsum ms | PyTorch ms | tl / numpy | tl / PyTorch | tl GFLOP/s "
          "| gemm crate ms | tl / gemm crate |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (program, init, op, flops) in workloads.items():
        path = os.path.join(DATA, "".join(c if c.isascii() and c.isalnum() else "_" for c in name) + ".tl")
        with open(path, "w") as f:
            f.write(program)
        out = subprocess.run([TL, "bench", path, "--repeat", "10", "--threads", threads],
                             capture_output=True, text=True, check=True).stdout
        tl = float(out.split("min ")[1].split(" ms")[0])
        peer = float(subprocess.run([py, "-c", PEER, init, op, "10", DATA], capture_output=True,
                                    text=True, check=True, env=env).stdout)
        tinit, top = TORCH[name]
        torch_ms = float(subprocess.run([py, "-c", TORCH_PEER, tinit, top, "10", DATA, threads],
                                        capture_output=True, text=True, check=True,
                                        env=env).stdout)
        gflops = "%.1f" % (flops / tl / 1e6) if flops else "-"
        crate = direct.get(name)
        crate_cols = "%.2f | %.2f" % (crate, tl / crate) if crate else "- | -"
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s |"
              % (name, tl, peer, torch_ms, tl / peer, tl / torch_ms, gflops, crate_cols), flush=True)


if __name__ == "__main__":
    main()
