#!/bin/bash
# The differential engine against the standard engine and ascent on the transitive-closure
# workloads (bench.tl: no answers written), and against the standard engine on single-source
# shortest paths (`min=`) over a random weighted graph of 100,000 nodes and 400,000 edges,
# with wall time and peak memory per process:
#   python3 bench/datalog/run.py tc-chain-2000 tc-random-5000-20000   (once: data, ascent-bench)
#   bench/datalog/differential.sh
set -e
HERE="$(cd "$(dirname "$0")" && pwd)"
T="$HERE/../../target/release/tl"
A="$HERE/ascent-bench/target/release/ascent-bench"
HOSTS="$(mktemp)"
printf "127.0.0.1:7411\n127.0.0.1:7412\n" > "$HOSTS"
for w in tc-chain-2000 tc-random-5000-20000; do
  cd "$HERE/data/$w"
  /usr/bin/time -f "$w standard: %e s, %M KB" "$T" run bench.tl --threads 1 > /dev/null
  /usr/bin/time -f "$w ascent: %e s, %M KB" "$A" tc . > /dev/null
  for n in 1 2; do
    /usr/bin/time -f "$w differential $n worker(s): %e s, %M KB" "$T" run bench.tl --engine differential --workers $n > /dev/null
  done
  P1="$(mktemp)"
  /usr/bin/time -o "$P1" -f "$w differential 2 processes (process 1): %e s, %M KB" \
    "$T" run bench.tl --engine differential --processes 2 --process 1 --hosts "$HOSTS" --workers 1 > /dev/null &
  /usr/bin/time -f "$w differential 2 processes (process 0): %e s, %M KB" \
    "$T" run bench.tl --engine differential --processes 2 --process 0 --hosts "$HOSTS" --workers 1 > /dev/null
  wait
  cat "$P1"
done

S="$HERE/data/sssp-random-100k"
mkdir -p "$S"
cd "$S"
[ -f w.tsv ] || python3 -c '
import random
r = random.Random("20261203-sssp")
n, m, e = 100000, 400000, set()
while len(e) < m:
    a, b = r.randrange(n), r.randrange(n)
    if a != b:
        e.add((a, b))
with open("w.tsv", "w") as f:
    f.writelines("%d\t%d\t%d\n" % (a, b, r.randrange(1, 100)) for a, b in sorted(e))
'
printf 'W = "w.tsv"\nDist[y] min= W[0, y]\nDist[z] min= Dist[y] + W[y, z]\n' > bench.tl
/usr/bin/time -f "sssp-random-100k standard: %e s, %M KB" "$T" run bench.tl --max-iters 1000 --threads 1 > /dev/null
for n in 1 2; do
  /usr/bin/time -f "sssp-random-100k differential $n worker(s): %e s, %M KB" "$T" run bench.tl --max-iters 1000 --engine differential --workers $n > /dev/null
done
