#!/usr/bin/env python3
"""Knowledge-graph completion against PyKEEN: ComplEx on Kinship and UMLS, trained by
`tl train examples/{kinship,umls}.tl` and by PyKEEN 1.11 (PyTorch, CPU) on the same split
with the same model, dimension, epochs, batch, optimizer and learning rate, in one run.

    python3 bench/kg/run.py [--epochs N] [--threads N] [--datasets kinship,umls]

Builds target/release/tl and installs pykeen into bench/.venv (git-ignored).

The shared setup: ComplEx with embedding dimension 100, reciprocal relations for head
prediction (PyKEEN: create_inverse_triples=True), 1-N scoring with a softmax cross-entropy over
all entities (PyKEEN: the LCWA training loop with CrossEntropyLoss), full batch (one step per
epoch: PyKEEN's batch is every (head, relation) pair), Adam at lr 0.05, 100 epochs, f32, one
thread each. Both report the filtered test MRR and Hits@1/3/10 over heads and tails (every
train, valid and test triple filtered). PyKEEN's regulariser is an L3 norm penalty of weight
0.01 on the embeddings a batch uses (its closest built-in to tl's weighted N3).

tl's time is the whole `tl train` process: starting, reading the files, training and the
final metrics. PyKEEN's is its own training time (`train_seconds`): setup and evaluation are
left out, in PyKEEN's favour. The output ends with one line per dataset:
`kinship: tl MRR 0.852 in 10.9 s, pykeen MRR 0.790 in 95.3 s`."""
import argparse, json, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import PY, ROOT, TL, setup  # noqa: E402

PYKEEN = r'''
import json, sys, time, torch
from pykeen.pipeline import pipeline
from pykeen.triples import TriplesFactory
folder, epochs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
train = TriplesFactory.from_path(f"{folder}/train.tsv", create_inverse_triples=True)
valid = TriplesFactory.from_path(f"{folder}/valid.tsv", entity_to_id=train.entity_to_id,
                                 relation_to_id=train.relation_to_id)
test = TriplesFactory.from_path(f"{folder}/test.tsv", entity_to_id=train.entity_to_id,
                                relation_to_id=train.relation_to_id)
pairs = len({(h, r) for h, r, _ in train.mapped_triples.tolist()})
result = pipeline(
    training=train, validation=valid, testing=test,
    model="ComplEx",
    model_kwargs=dict(embedding_dim=100, regularizer="lp",
                      regularizer_kwargs=dict(weight=0.01, p=3.0, normalize=False)),
    loss="crossentropy",
    training_loop="lcwa",
    optimizer="adam", optimizer_kwargs=dict(lr=0.05),
    training_kwargs=dict(num_epochs=epochs, batch_size=2 * pairs, use_tqdm_batch=False),
    evaluator_kwargs=dict(filtered=True),
    evaluation_kwargs=dict(additional_filter_triples=[train.mapped_triples, valid.mapped_triples],
                           use_tqdm=False),
    random_seed=0, device="cpu", use_tqdm=False,
)
m = result.metric_results
print(json.dumps(dict(
    seconds=result.train_seconds,
    mrr=m.get_metric("both.realistic.inverse_harmonic_mean_rank"),
    hits1=m.get_metric("both.realistic.hits_at_1"),
    hits3=m.get_metric("both.realistic.hits_at_3"),
    hits10=m.get_metric("both.realistic.hits_at_10"))))
'''


def run_tl(name, epochs, threads):
    start = time.perf_counter()
    out = subprocess.run(
        [TL, "train", f"examples/{name}.tl", "--epochs", str(epochs), "--lr", "0.05",
         "--threads", str(threads), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    vals = dict(l.split(" = ") for l in out.stdout.splitlines() if " = " in l)
    return dict(seconds=seconds, mrr=float(vals["MRR"]), hits1=float(vals["Hits1"]),
                hits3=float(vals["Hits3"]), hits10=float(vals["Hits10"]))


def run_pykeen(name, epochs, threads):
    out = subprocess.run(
        [PY, "-c", PYKEEN, os.path.join(ROOT, "examples", "data", name), str(epochs),
         str(threads)],
        capture_output=True, text=True, check=True,
        env=dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--datasets", default="kinship,umls")
    args = ap.parse_args()
    setup({"pykeen": "pykeen==1.11.1"})
    names = args.datasets.split(",")
    results = {n: (run_tl(n, args.epochs, args.threads), run_pykeen(n, args.epochs, args.threads))
               for n in names}
    print(f"ComplEx, dim 100, {args.epochs} epochs, full batch, Adam lr 0.05, "
          f"{args.threads} thread(s)")
    print("| dataset | engine | MRR | Hits@1 | Hits@3 | Hits@10 | train s | s/epoch |")
    print("|---|---|---|---|---|---|---|---|")
    for n, (t, p) in results.items():
        for engine, r in (("tl", t), ("pykeen", p)):
            print(f"| {n} | {engine} | {r['mrr']:.3f} | {r['hits1']:.3f} | {r['hits3']:.3f} | "
                  f"{r['hits10']:.3f} | {r['seconds']:.1f} | {r['seconds'] / args.epochs:.3f} |")
    for n, (t, p) in results.items():
        print(f"{n}: tl MRR {t['mrr']:.3f} in {t['seconds']:.1f} s, "
              f"pykeen MRR {p['mrr']:.3f} in {p['seconds']:.1f} s")


if __name__ == "__main__":
    main()
