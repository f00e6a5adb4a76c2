#!/usr/bin/env python3
"""Writes tests/data/low_precision.tsv: f32 values and what each narrow storage type (§4) must
hold for them, computed independently of tl with ml_dtypes (bf16, f16 via NumPy, fp8 E4M3FN)
and NumPy (i8: round half to even, then clamp to ±127).

    python3 -m venv /tmp/lp && /tmp/lp/bin/pip install numpy ml_dtypes
    /tmp/lp/bin/python scripts/low_precision.py

Inputs are f32, so every library rounds them once (ml_dtypes narrows f64 through f32).
ml_dtypes turns fp8 values beyond 464 into NaN; the SPEC saturates them to ±448, so those
rows are written as ±448 (the saturation is the SPEC's, not ml_dtypes')."""
import os
import numpy as np
import ml_dtypes

rng = np.random.default_rng(7)
values = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 126.5, 127.5, -127.5, 200.0, 448.0, 449.0,
          464.0, 465.0, 480.0, 1e9, -1e9, 65504.0, 65520.0, 70000.0, 3.0e38,
          2.0 ** -6, 2.0 ** -7, 2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -9, 2.0 ** -14, 2.0 ** -24,
          2.0 ** -25, 2.0 ** -133, 1.00390625, 1.01171875, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8]
# Ties of each format: halfway between neighbours, at several exponents.
for e in range(-8, 9):
    for m in range(8):
        values.append((1 + (2 * m + 1) / 16) * 2.0 ** e)   # fp8 ties (3 mantissa bits)
        values.append((1 + (2 * m + 1) / 256) * 2.0 ** e)  # bf16 ties (7 bits)
        values.append((1 + (2 * m + 1) / 2048) * 2.0 ** e)  # f16 ties (10 bits)
for scale in [1e-8, 1e-4, 1e-2, 1.0, 10.0, 100.0, 1e4, 1e6]:
    values.extend((rng.standard_normal(40) * scale).tolist())
x = np.array(values, dtype=np.float32)
x = np.concatenate([x, -x])

bf16 = x.astype(ml_dtypes.bfloat16).astype(np.float64)
f16 = x.astype(np.float16).astype(np.float64)
fp8 = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
fp8 = np.where(np.abs(x) > 464, np.copysign(448.0, x), fp8)
i8 = np.clip(np.rint(x.astype(np.float64)), -127, 127)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "low_precision.tsv")
with open(out, "w") as f:
    f.write("value\tbf16\tf16\tfp8\ti8\n")
    for row in zip(x.astype(np.float64), bf16, f16, fp8, i8):
        f.write("\t".join(repr(float(v)) for v in row) + "\n")
print("wrote", len(x), "rows to", os.path.normpath(out))
