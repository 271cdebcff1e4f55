#!/usr/bin/env bash
# The binding ladder: recall at equal budgets from scratch, one recipe for every architecture (the dense mixture,
# the rate held then annealed over the last quarter), each architecture at three or four learning rates around its
# best (1e-3, 3.2e-3, 1e-2 for all; the plain transformer adds 3.2e-4 and the shifted Mamba 3.2e-2, because their
# best rate sat at the edge of the shared three, and the plain transformer 1e-4, because 3.2e-4 was the one rate
# that bound its 16-pair cell), the best reported per cell.
# Cells: tables of 4, 8 and 16 pairs drawn from key and value pools of 8, 16 and 32 (full tables, fillers, 8 queries);
# every point stops at the first evaluation that reaches 90% on its own cell, or at 12,000 steps x 64.
#   plain:    the transformer as the paper builds it (learned positions, untied, no token shift) and Mamba as the
#             paper builds it (its convolution alone; weight decay spares A_log and D, RMSNorm eps 1e-5), 2 seeds
#   shift:    the same two with a 3-token shift on the embeddings, 2 seeds
#   controls: the LSTM and the MLP with the shift, 1 seed (neither binds at any budget tried so far)
# Run from the repository root; run it again to resume (finished points are read back, stopped ones go on; in a
# fresh clone, the points already in figures/readme/binding-ladder/ count as finished).
# JOBS=2 trains two points at once, one thread each; a second copy of this script on another machine that shares
# RUNS trains other points of the same sweeps. Then `python experiments/binding_ladder.py` copies the results into
# figures/readme/binding-ladder/. Time: a point takes 1-150 minutes on one thread; the whole ladder (108 points)
# trained for 25 CPU-hours, most of it in plain points that never reach the bar.
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs/binding-ladder}
export OMP_NUM_THREADS=1
LADDER=(--task recall --axis N=4,8,16 --axis-with pool=8,16,32 -T N_min=null -T fillers=4 -T gap=2 -T queries=8
        --curriculum dense-mix --decay 0.25 --steps 12000 --batch-size 64 --lr 1e-3,3.2e-3,1e-2 --threshold 0.9
        --eval-every 250 --n 1024 --jobs "${JOBS:-1}")
python experiments/binding_ladder.py --restore --runs "$RUNS"   # a fresh clone resumes from the shipped points
PAPER=(-M positional=learned -M tied=false -M ssm_weight_decay=false -M norm_eps=1e-5)
interp sweep "${LADDER[@]}" --lr transformer=1e-4,3.2e-4,1e-3,3.2e-3,1e-2 --archs transformer,mamba -M shift=null \
  "${PAPER[@]}" --seeds 0,1 --out "$RUNS/plain"
interp sweep "${LADDER[@]}" --archs lstm,mlp -M shift=3 --seeds 0 --out "$RUNS/controls"
interp sweep "${LADDER[@]}" --lr mamba=1e-3,3.2e-3,1e-2,3.2e-2 --archs transformer,mamba -M shift=3 "${PAPER[@]}" \
  --seeds 0,1 --out "$RUNS/shift"
