#!/usr/bin/env python3
"""The learning benchmark: one training step (forward, backward, Adam update) of the digits
MLP 64-256-256-10 at batch 128, `tl train` against PyTorch (CPU) in the same invocation.

    python3 bench/learning/run.py [--threads N] [--steps N]

Builds target/release/tl and installs numpy and torch into bench/.venv. tl's per-step time is
measured in-process by `tl train` (the `examples_per_sec` column of --log: the step alone,
without process start or loading files); PyTorch's with time.perf_counter around the same
step. Both report the median step after 5 warm-up steps."""
import csv, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(ROOT, "bench", ".venv")
TL = os.path.join(ROOT, "target", "release", "tl")
PY = os.path.join(VENV, "bin", "python")

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


def setup():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    if not os.path.exists(PY):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    probe = subprocess.run([PY, "-c", "import numpy, torch"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([PY, "-m", "pip", "install", "-q", "numpy", "torch"], check=True)


def tl_step_ms(threads, steps):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "m.csv")
        subprocess.run([TL, "train", "examples/digits_mlp.tl", "--batch", "Example:128",
                        "--steps", str(steps), "--lr", "0.003", "--threads", str(threads),
                        "--log", log, "--quiet"], cwd=ROOT, check=True, capture_output=True)
        rows = list(csv.DictReader(open(log)))
        return statistics.median(128 / float(r["examples_per_sec"]) * 1e3 for r in rows[5:])


def main():
    args = sys.argv[1:]
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 1
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 60
    setup()
    data = os.path.join(ROOT, "examples", "data")
    torch_ms = float(subprocess.run(
        [PY, "-c", TORCH, str(threads), str(steps), os.path.join(data, "digits_train_x.npy"),
         os.path.join(data, "digits_train_y.npy")], capture_output=True, text=True,
        check=True).stdout.strip())
    tl_ms = tl_step_ms(threads, steps)
    print(f"| workload | tl | PyTorch | tl / PyTorch |")
    print(f"|---|---|---|---|")
    print(f"| MLP 64-256-256-10 training step, batch 128, {threads} thread(s) | "
          f"{tl_ms:.2f} ms | {torch_ms:.2f} ms | {tl_ms / torch_ms:.1f}x |")


if __name__ == "__main__":
    main()
