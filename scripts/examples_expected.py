#!/usr/bin/env python3
"""Generates the examples' data (fixed seed) and computes their expected outputs with NumPy,
independently of tensor-logic, straight from the definitions in SPEC.md.

    python3 scripts/examples_expected.py      # rewrites examples/data/*.npy, tests/expected/*.out

Each expected file holds what `tl run examples/NAME.tl` must print (SPEC §10); the test
`tests/examples.rs` compares numbers within rtol 1e-4, atol 1e-5."""
import os
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "examples", "data")
EXPECTED = os.path.join(ROOT, "tests", "expected")
rng = np.random.default_rng(20261129)


def save(name, array):
    np.save(os.path.join(DATA, name), np.asarray(array, dtype=np.float64))


def rnd(*shape, scale=1.0):
    return np.round(rng.normal(0.0, scale, size=shape), 3)


def fmt(v):
    v = float(v)
    if v == 0:
        return "0"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return "%.9g" % v


def label(x):
    if isinstance(x, str):
        bare = x[:1].isupper() and all(c.isalnum() or c in "_'" for c in x)
        return x if bare else '"%s"' % x
    return str(x)


def dense(name, array, labels=None):
    array = np.asarray(array)
    if array.ndim == 0:
        return ["%s = %s" % (name, fmt(array))]
    out = []
    for idx in np.ndindex(*array.shape):
        parts = [label(labels[ax][i]) if labels and labels[ax] else str(i) for ax, i in enumerate(idx)]
        out.append("%s[%s] = %s" % (name, ", ".join(parts), fmt(array[idx])))
    return out


def write(name, lines):
    with open(os.path.join(EXPECTED, name + ".out"), "w") as f:
        f.write("\n".join(lines) + "\n")


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def relu(x):
    return np.maximum(x, 0.0)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def lnorm(x, axis=-1):
    m = x.mean(axis=axis, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axis, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


def family():
    people = ["Alice", "Bob", "Charlie", "Dana", "Eve", "Frank"]
    parent = {("Alice", "Bob"), ("Bob", "Charlie"), ("Bob", "Dana"), ("Eve", "Frank")}
    sister = {("Eve", "Bob")}
    anc = set(parent)
    while True:
        new = anc | {(x, z) for (x, y) in anc for (y2, z) in parent if y == y2}
        if new == anc:
            break
        anc = new
    aunt = sorted({(x, z) for (x, y) in sister for (y2, z) in parent if y == y2}, key=lambda p: people.index(p[1]))
    lines = ["Ancestor(Alice, %s)" % y for y in people if ("Alice", y) in anc]
    lines += ["Aunt(%s, %s)" % p for p in aunt]
    lines.append("true" if ("Charlie", "Alice") in anc else "false")
    lines += ["Children[%s] = %d" % (x, sum(1 for (a, _) in parent if a == x)) for x in people]
    write("family", lines)


def perceptron():
    w, b = np.array([0.5, -1.2, 0.8, 2.0]), -0.5
    x = np.array([1, 0, 1, 0])
    batch = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 1, 1]])
    write("perceptron", dense("Y", float(w @ x + b > 0)) + dense("Ys", (batch @ w + b > 0).astype(float)))


def mlp():
    x, w1, b1, w2, b2 = rnd(3), rnd(5, 3), rnd(5), rnd(2, 5), rnd(2)
    layers = rnd(4, 3, 3)
    for n, a in [("mlp_in", x), ("mlp_w1", w1), ("mlp_b1", b1), ("mlp_w2", w2), ("mlp_b2", b2), ("mlp_layers", layers)]:
        save(n, a)
    out = sig(w2 @ relu(w1 @ x + b1) + b2)
    act = [x]
    for l in range(1, 4):
        act.append(sig(layers[l] @ act[-1]))
    write("mlp", dense("Out", out) + dense("Act", np.array(act)))


def rnn():
    w, v, u = rnd(3, 3, scale=0.5), rnd(3, 2), rnd(2, 6)
    for n, a in [("rnn_w", w), ("rnn_v", v), ("rnn_u", u)]:
        save(n, a)
    s = np.zeros(3)
    for t in range(u.shape[1]):
        s = np.tanh(w @ s + v @ u[:, t])
    write("rnn", dense("State", s))


def cnn():
    image = rng.integers(0, 5, size=(6, 6)).astype(float)
    filt = rng.integers(-1, 3, size=(3, 3)).astype(float)
    save("cnn_image", image)
    save("cnn_filter", filt)
    feat = np.zeros((4, 4))
    for x in range(4):
        for y in range(4):
            feat[x, y] = max(0.0, (filt * image[x:x + 3, y:y + 3]).sum() + 0.1)
    sump = feat.reshape(2, 2, 2, 2).sum(axis=(1, 3))
    maxp = feat.reshape(2, 2, 2, 2).max(axis=(1, 3))
    write("cnn", dense("Features", feat) + dense("SumPool", sump) + dense("MaxPool", maxp))


def gnn():
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (1, 4)]
    edges = sorted(set(edges + [(b, a) for a, b in edges]))
    with open(os.path.join(DATA, "gnn_edges.tsv"), "w") as f:
        f.writelines("%d\t%d\n" % e for e in edges)
    x, wp, wagg, wself, wout = rnd(6, 4), rnd(2, 4, 4, scale=0.5), rnd(2, 4, 4, scale=0.5), rnd(2, 4, 4, scale=0.5), rnd(4)
    for n, a in [("gnn_features", x), ("gnn_wp", wp), ("gnn_wagg", wagg), ("gnn_wself", wself), ("gnn_wout", wout)]:
        save(n, a)
    adj = np.zeros((6, 6))
    for a, b in edges:
        adj[a, b] = 1
    emb = x
    for l in range(2):
        z = relu(emb @ wp[l].T)
        agg = adj @ z
        emb = relu(agg @ wagg[l].T + emb @ wself[l].T)
    write("gnn", dense("NodeClass", sig(emb @ wout)) + dense("EdgeScore", sig(emb @ emb.T)) + dense("GraphClass", sig((emb @ wout).sum())))


def transformer():
    words = open(os.path.join(DATA, "sentence.txt")).read().split()
    vocab = list(dict.fromkeys(words))
    tok = np.zeros((len(words), len(vocab)))
    for p, w in enumerate(words):
        tok[p, vocab.index(w)] = 1
    emb, wq, wk, wv = rnd(len(vocab), 4), rnd(2, 2, 4), rnd(2, 2, 4), rnd(2, 2, 4)
    ws, wp, wo, wout = rnd(4, 4, scale=0.5), rnd(5, 4, scale=0.5), rnd(4, 5, scale=0.5), rnd(len(vocab), 4)
    for n, a in [("tf_emb", emb), ("tf_wq", wq), ("tf_wk", wk), ("tf_wv", wv), ("tf_ws", ws), ("tf_wp", wp), ("tf_wo", wo), ("tf_wout", wout)]:
        save(n, a)
    P, L, De = len(words), 10000.0, 4.0
    pe = np.zeros((P, 4))
    for p in range(P):
        for d in range(4):
            pe[p, d] = np.sin(p / L ** (d / De)) if d % 2 == 0 else np.cos(p / L ** ((d - 1) / De))
    s0 = tok @ emb + pe
    q = np.einsum("hkd,pd->hpk", wq, s0)
    k = np.einsum("hkd,pd->hpk", wk, s0)
    v = np.einsum("hkd,pd->hpk", wv, s0)
    comp = softmax(np.einsum("hpk,hqk->hpq", q, k) / np.sqrt(2.0))
    attn = np.einsum("hpq,hqv->hpv", comp, v)
    merge = attn.transpose(1, 0, 2).reshape(P, 4)
    s1 = lnorm(merge @ ws.T + s0)
    s2 = lnorm(relu(s1 @ wp.T) @ wo.T + s1)
    nxt = softmax(s2 @ wout.T)
    write("transformer", dense("Comp", comp) + dense("Next", nxt))


def kernels():
    X = np.array([[0.5, 1.0], [-1.0, 0.3], [1.5, -0.5], [-0.2, -1.2]])
    lab, alpha = np.array([1, -1, 1, -1.0]), np.array([0.7, 0.4, 0.3, 0.6])
    Q = np.array([[0.0, 0.5], [1.0, 1.0], [-1.0, -1.0]])
    B, V = 0.1, 1.5
    poly = (Q @ X.T + 1) ** 2
    gauss = np.exp(-((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1) / V)
    write("kernels", dense("Poly", poly) + dense("Gauss", gauss)
          + dense("PolyPredict", ((poly * alpha * lab).sum(1) + B > 0).astype(float))
          + dense("GaussScore", (gauss * alpha * lab).sum(1) + B))


def bayes():
    pc, ps = np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.9, 0.1]])
    pr = np.array([[0.8, 0.2], [0.2, 0.8]])
    pw = np.array([[[1.0, 0.0], [0.1, 0.9]], [[0.1, 0.9], [0.01, 0.99]]])
    joint = np.einsum("c,cs,cr,srw->csrw", pc, ps, pr, pw)
    pwet = joint.sum(axis=(0, 1, 2))
    prw = joint.sum(axis=(0, 1))
    write("bayes", dense("PWet", pwet) + dense("PRainGivenWet", prw[:, 1] / pwet[1]) + dense("PWetTree", pwet))


def embeddings():
    objs = ["Ann", "Bob", "Cid", "Dee", "Eve"]
    emb = rng.normal(size=(5, 32))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    save("emb", emb)
    emb = emb.astype(np.float32).astype(np.float64)
    knows = np.zeros((5, 5))
    for a, b in [(0, 1), (1, 2), (2, 3), (3, 4)]:
        knows[a, b] = 1
    embr = emb.T @ knows @ emb
    d = emb @ embr @ emb.T
    write("embeddings", dense("Deduced", (d - 0.5 > 0).astype(float), [objs, objs])
          + dense("Analogy", sig((d - 0.5) / 0.1), [objs, objs]))


def text():
    words = open(os.path.join(DATA, "story.txt")).read().split()
    vocab = list(dict.fromkeys(words))
    lines = ["Text(%d, %s)" % (p, label(w)) for p, w in enumerate(words)]
    lines += ["Count[%s] = %d" % (label(w), words.count(w)) for w in vocab]
    write("text", lines)


def roads():
    road = {("Ayr", "Bude"): 4, ("Bude", "Cork"): 3, ("Ayr", "Cork"): 9, ("Cork", "Deal"): 1,
            ("Bude", "Deal"): 7, ("Deal", "Ely"): 2}
    towns = ["Ayr", "Bude", "Cork", "Deal", "Ely"]
    dist = {"Ayr": 0}
    while True:  # Bellman-Ford relaxation
        new = dict(dist)
        for (a, b), w in road.items():
            if a in new and new[a] + w < new.get(b, float("inf")):
                new[b] = new[a] + w
        if new == dist:
            break
        dist = new
    write("roads", ["Dist[Ayr, %s] = %s" % (t, fmt(dist[t])) for t in towns if t in dist])


if __name__ == "__main__":
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(EXPECTED, exist_ok=True)
    for f in [family, perceptron, mlp, rnn, cnn, gnn, transformer, kernels, bayes, embeddings, text,
              roads]:
        f()
