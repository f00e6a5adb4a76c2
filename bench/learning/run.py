#!/usr/bin/env python3
"""The learning benchmark: one training step (forward, backward, Adam update), `tl train`
against the same model in PyTorch (CPU) in the same invocation, for the digits MLP
64-256-256-10 at batch 128, the tiny transformer LM of examples/tiny_lm.tl (one block,
two heads, d=32, 16 positions) at 12 windows per batch, and the character-level LM of
examples/shakespeare_lm.tl (4 blocks, 4 heads, d=128, context 64) at 32 windows per batch
(at most 25 steps; also reported as tokens per second).

    python3 bench/learning/run.py [--threads N] [--steps N]
    python3 bench/learning/run.py --parity [--steps N]

`--parity` checks the character LM against PyTorch from the same start: PyTorch writes its
initial weights as a checkpoint, `tl train --load` starts from it, both take the same
unshuffled batches, and the per-step losses are printed side by side (they agree to about
1e-4: both compute in f32).

Builds target/release/tl and installs numpy and torch into bench/.venv. tl's per-step time is
measured in-process by `tl train` (the `examples_per_sec` column of --log: the step alone,
without process start or loading files); PyTorch's with time.perf_counter around the same
step. Both report the median step after 5 warm-up steps."""
import csv, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import PY, ROOT, TL, setup  # noqa: E402

TORCH = r'''
import sys, time, statistics, numpy as np, torch
threads, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
X = torch.tensor(np.load(sys.argv[3])); Y = torch.tensor(np.load(sys.argv[4]))
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                        torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.Adam(m.parameters(), lr=0.003)
times = []
for s in range(steps):
    i = (s * 128) % (len(X) - 128)
    xb, yb = X[i:i + 128], Y[i:i + 128]
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = -(yb * torch.log_softmax(m(xb), dim=1)).sum()
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
print(statistics.median(times[5:]) * 1e3)
'''


TORCH_LM = r'''
import sys, time, statistics, torch
threads, steps, vocab = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
B, P, D, H, K, F = 12, 16, 32, 2, 16, 64
tok = torch.randint(0, vocab, (B, P)); tgt = torch.randint(0, vocab, (B, P))
emb = torch.nn.Embedding(vocab, D); pos = torch.nn.Parameter(torch.randn(P, D) * 0.1)
wq, wk, wv = (torch.nn.Linear(D, H * K, bias=False) for _ in range(3))
ws = torch.nn.Linear(H * K, D, bias=False); w1 = torch.nn.Linear(D, F, bias=False)
w2 = torch.nn.Linear(F, D, bias=False); wout = torch.nn.Linear(D, vocab, bias=False)
mods = [emb, wq, wk, wv, ws, w1, w2, wout]
params = [pos] + [p for m in mods for p in m.parameters()]
opt = torch.optim.Adam(params, lr=0.01)
mask = torch.triu(torch.ones(P, P, dtype=torch.bool), 1)
def step():
    x = emb(tok) + pos
    q = wq(x).view(B, P, H, K).transpose(1, 2); k = wk(x).view(B, P, H, K).transpose(1, 2)
    v = wv(x).view(B, P, H, K).transpose(1, 2)
    s = (q @ k.transpose(-1, -2) / 4).masked_fill(mask, -1e9)
    o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, P, H * K)
    x1 = torch.nn.functional.layer_norm(ws(o) + x, (D,), eps=1e-5)
    x2 = torch.nn.functional.layer_norm(w2(torch.relu(w1(x1))) + x1, (D,), eps=1e-5)
    return torch.nn.functional.cross_entropy(wout(x2).view(B * P, vocab), tgt.view(-1))
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad(); loss = step(); loss.backward(); opt.step()
    times.append(time.perf_counter() - t0)
print(statistics.median(times[5:]) * 1e3)
'''


TORCH_CHAR_LM = r'''
import sys, time, statistics, numpy as np, torch
threads, steps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
text = torch.tensor(np.load(sys.argv[3]).astype(np.int64))
parity = sys.argv[4] if len(sys.argv) > 4 else None
B, P, D, H, K, F, L, V = 32, 64, 128, 4, 32, 512, 4, 65
lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
emb = torch.nn.Embedding(V, D); pos = torch.nn.Parameter(torch.randn(P, D) * 0.02)
blocks = torch.nn.ModuleList(torch.nn.ModuleList([lin(D, H * K), lin(D, H * K), lin(D, H * K),
                             lin(H * K, D), lin(D, F), lin(F, D)]) for _ in range(L))
wout = lin(D, V)
params = [pos, *emb.parameters(), *blocks.parameters(), *wout.parameters()]
opt = torch.optim.Adam(params, lr=0.003)
if parity:
    from safetensors.numpy import save_file
    f = lambda t: np.ascontiguousarray(t.detach().numpy())
    per_layer = lambda i, shape: f(torch.stack([b[i].weight.view(*shape) for b in blocks]))
    save_file({"Emb": f(emb.weight), "Pos": f(pos), "WQ": per_layer(0, (H, K, D)),
               "WK": per_layer(1, (H, K, D)), "WV": per_layer(2, (H, K, D)),
               "WS": per_layer(3, (D, H, K)), "W1": per_layer(4, (F, D)),
               "W2": per_layer(5, (D, F)), "WOut": f(wout.weight)}, parity)
mask = torch.triu(torch.ones(P, P, dtype=torch.bool), 1)
def step(batch):
    x = emb(batch[:, :P]) + pos
    for wq, wk, wv, ws, w1, w2 in blocks:
        q, k, v = (w(x).view(B, P, H, K).transpose(1, 2) for w in (wq, wk, wv))
        s = (q @ k.transpose(-1, -2) / K ** 0.5).masked_fill(mask, -1e9)
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, P, H * K)
        x1 = torch.nn.functional.layer_norm(ws(o) + x, (D,), eps=1e-5)
        x = torch.nn.functional.layer_norm(w2(torch.relu(w1(x1))) + x1, (D,), eps=1e-5)
    return torch.nn.functional.cross_entropy(wout(x).reshape(B * P, V), batch[:, 1:].reshape(-1))
times = []
for s in range(steps):
    batch = text[s * B:(s + 1) * B]
    t0 = time.perf_counter()
    opt.zero_grad(); loss = step(batch); loss.backward(); opt.step()
    times.append(time.perf_counter() - t0)
    if parity:
        print(loss.item())
if not parity:
    print(statistics.median(times[5:]) * 1e3)
'''


def tl_step_ms(program, batch, threads, steps):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "m.csv")
        domain, size = batch.split(":")
        subprocess.run([TL, "train", program, "--batch", batch, "--steps", str(steps),
                        "--lr", "0.003", "--threads", str(threads), "--log", log, "--quiet"],
                       cwd=ROOT, check=True, capture_output=True)
        rows = list(csv.DictReader(open(log)))
        return statistics.median(int(size) / float(r["examples_per_sec"]) * 1e3
                                 for r in rows[5:])


def peer_ms(script, *args):
    out = subprocess.run([PY, "-c", script, *map(str, args)], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip())


def parity(steps):
    """Per-step losses of the character LM in tl and PyTorch from the same initial weights."""
    data = os.path.join(ROOT, "examples", "data", "shakespeare_chars.npy")
    with tempfile.TemporaryDirectory() as tmp:
        start, log = os.path.join(tmp, "start.safetensors"), os.path.join(tmp, "m.csv")
        out = subprocess.run([PY, "-c", TORCH_CHAR_LM, "2", str(steps), data, start],
                             capture_output=True, text=True, check=True)
        torch_losses = [float(x) for x in out.stdout.split()]
        subprocess.run([TL, "train", "examples/shakespeare_lm.tl", "--batch", "Window:32",
                        "--steps", str(steps), "--lr", "0.003", "--threads", "2", "--load",
                        start, "--log", log, "--quiet"], cwd=ROOT, check=True)
        tl_losses = [float(r["loss"]) for r in csv.DictReader(open(log))]
    print("| step | tl loss | PyTorch loss |")
    print("|---|---|---|")
    for i, (a, b) in enumerate(zip(tl_losses, torch_losses)):
        print(f"| {i + 1} | {a:.4f} | {b:.4f} |")
    worst = max(abs(a - b) for a, b in zip(tl_losses, torch_losses))
    print(f"largest difference over {len(tl_losses)} steps: {worst:.2e}")


def main():
    args = sys.argv[1:]
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 1
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 60
    big_steps = min(steps, 25)
    setup({"numpy": "numpy", "torch": "torch", "safetensors": "safetensors"})
    if "--parity" in args:
        parity(steps if "--steps" in args else 30)
        return
    data = os.path.join(ROOT, "examples", "data")
    vocab = len(set(open(os.path.join(data, "rhymes.txt")).read().split()))
    rows = [
        (f"MLP 64-256-256-10 training step, batch 128",
         tl_step_ms("examples/digits_mlp.tl", "Example:128", threads, steps),
         peer_ms(TORCH, threads, steps, os.path.join(data, "digits_train_x.npy"),
                 os.path.join(data, "digits_train_y.npy"))),
        (f"tiny transformer LM training step, 12 windows of 16",
         tl_step_ms("examples/tiny_lm.tl", "Window:12", threads, steps),
         peer_ms(TORCH_LM, threads, steps, vocab)),
        (f"character LM (4 blocks, d 128, context 64) training step, 32 windows",
         tl_step_ms("examples/shakespeare_lm.tl", "Window:32", threads, big_steps),
         peer_ms(TORCH_CHAR_LM, threads, big_steps,
                 os.path.join(data, "shakespeare_chars.npy"))),
    ]
    print(f"{threads} thread(s), median step after 5 warm-up steps")
    print("| workload | tl | PyTorch | tl / PyTorch |")
    print("|---|---|---|---|")
    for name, tl_ms, torch_ms in rows:
        print(f"| {name} | {tl_ms:.2f} ms | {torch_ms:.2f} ms | {tl_ms / torch_ms:.1f}x |")
    tokens = 32 * 64
    char_tl, char_torch = rows[-1][1], rows[-1][2]
    print(f"character LM: tl {tokens / char_tl * 1e3:.0f} tokens/s, "
          f"PyTorch {tokens / char_torch * 1e3:.0f} tokens/s")


if __name__ == "__main__":
    main()
