#!/usr/bin/env bash
# Wall time and peak memory of `tl run` on generated inputs, with the standard engine and with
# the reference evaluator (the oracle). Prints a Markdown table.
#   bench/engines.sh            (builds target/release/tl first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
tl=$PWD/target/release/tl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

measure() { # name, engine, program file
  local out
  out=$( { /usr/bin/time -f "%e %M" "$tl" run "$3" --engine "$2" --threads 1 >/dev/null; } 2>&1 | tail -1 )
  printf '| %s | %s | %s | %s |\n' "$1" "$2" "${out% *}" "$(( ${out#* } / 1024 ))"
}

chain() { # n, file
  : > "$2"
  for ((i = 0; i < $1 - 1; i++)); do echo "Edge(N$i, N$((i + 1)))." >> "$2"; done
  printf 'Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\nCount = Path(x, y)\nCount?\n' >> "$2"
}

echo "| workload | engine | wall s | peak MiB |"
echo "|---|---|---|---|"
for n in 50 100 150; do
  chain $n "$work/chain$n.tl"
  measure "transitive closure, chain of $n nodes" reference "$work/chain$n.tl"
done
for n in 150 1000 2000; do
  chain $n "$work/chain$n.tl"
  measure "transitive closure, chain of $n nodes" standard "$work/chain$n.tl"
done
f=$work/sparse.tl
: > "$f"
for ((i = 0; i < 100000; i++)); do echo "Edge($i, $(( (i * 7919 + 1) % 100000 )))." >> "$f"; done
printf 'Next(y) :- Edge(5, y).\nNext(y)?\n' >> "$f"
measure "100,000 facts over 100,000 nodes (a 10^10 relation, kept sparse)" standard "$f"
python3 - "$work/mm.tl" <<'PY'
import sys, random
random.seed(1)
n = 48
row = lambda: "[" + ", ".join("%.3f" % random.uniform(-1, 1) for _ in range(n)) + "]"
with open(sys.argv[1], "w") as f:
    f.write("A = [" + ", ".join(row() for _ in range(n)) + "]\n")
    f.write("B = [" + ", ".join(row() for _ in range(n)) + "]\n")
    f.write("C[i, k] = A[i, j] B[j, k]\nT = C[i, k]\nT?\n")
PY
measure "matmul 48x48x48 through an equation" standard "$work/mm.tl"
python3 - "$work/sp.tl" "$work/sp.tsv" <<'PY'
import sys, random
r = random.Random(1)
edges = {}
while len(edges) < 6000:
    edges[(r.randrange(300), r.randrange(300))] = r.randint(1, 20)
with open(sys.argv[2], "w") as f:
    f.writelines("%d\t%d\t%d\n" % (a, b, w) for (a, b), w in sorted(edges.items()))
with open(sys.argv[1], "w") as f:
    f.write('Edge = "sp.tsv"\nDist[x, y] min= Edge[x, y]\nDist[x, z] min= Dist[x, y] + Edge[y, z]\n'
            'Total = Dist[x, y]\nTotal?\n')
PY
for engine in reference standard; do
  measure "shortest paths (min=), 300 nodes, 6,000 weighted edges" $engine "$work/sp.tl"
done
for ex in family mlp transformer gnn; do measure "examples/$ex.tl" standard "examples/$ex.tl"; done
