"""Host overhead of the Python API on a tiny program: `bind` + `run` + reading the result,
per iteration, against the same computation in NumPy (and PyTorch eager, when installed).

    pip install ./python && python bench/python/overhead.py
"""

import time

import numpy as np

import tensorlogic as tl


def per_call(f, n=20000):
    for _ in range(200):
        f()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main():
    x = np.ones(4, np.float32)
    prog = tl.Program("X : real[4]\nY[i] = X[i] * 2 + 1\n")

    def tensorlogic():
        prog.bind("X", x)
        prog.run(threads=1)
        return prog["Y"]

    rows = [("tensorlogic bind+run+read", per_call(tensorlogic)),
            ("numpy x * 2 + 1", per_call(lambda: x * 2 + 1))]
    try:
        import torch
        t = torch.ones(4)
        rows.append(("torch eager t * 2 + 1", per_call(lambda: t * 2 + 1)))
    except ImportError:
        pass
    for name, us in rows:
        print(f"{name:28s} {us:7.2f} us")


if __name__ == "__main__":
    main()
