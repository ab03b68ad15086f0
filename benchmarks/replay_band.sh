#!/bin/sh
# `replay --policy asap` with the Monte-Carlo band against the same command on a tree without it,
# alternated so a loaded machine slows both alike: BASE=/path/to/old/tree STORE=coupled.store sh benchmarks/replay_band.sh
# Measured (2-core shared VM, coupled sample, medians of 5): 5.55 s before, 6.97 s with the band (1.26×).
set -eu
NEW=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python}
for i in 1 2 3 4 5; do
  for tree in "$BASE" "$NEW"; do
    t0=$(date +%s.%N)
    (cd /tmp && PYTHONPATH="$tree" "$PY" -m asaptrace.cli replay "$STORE" --policy asap --json >/dev/null 2>&1)
    t1=$(date +%s.%N)
    echo "$tree $(echo "$t1 - $t0" | bc)"
  done
done
