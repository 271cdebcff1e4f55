#!/usr/bin/env bash
# The process wind tunnels' models (Mess3 and RRXOR, every architecture): for each task and architecture, an
# `interp tune` search over four learning rates at one budget (2,000 steps x 64 sequences of 10 tokens, the
# tasks' cpu preset: 4 layers, capacity matched to the transformer), no pruner, seed 0. The two tasks run side by
# side, one thread each (about 40 minutes on a 2-core machine). Rerunning resumes: finished trials are kept.
# The best trial of each search is what models/pretrained/{mess3,rrxor}-ARCH-cpu ship.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
OUT=${OUT:-runs/belief-geometry}
search() {  # TASK: every architecture's search, one after the other
  for arch in transformer mamba lstm mlp; do
    interp tune --task "$1" --arch "$arch" --space lr=1e-3,3e-3,1e-2,3e-2 --pruner none --eval-size 1000 \
      --out "$OUT/$1-$arch" > "$OUT/$1-$arch.log" 2>&1
  done
}
mkdir -p "$OUT"
search mess3 &
search rrxor &
wait
