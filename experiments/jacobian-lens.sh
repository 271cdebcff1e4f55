#!/bin/sh
# The Jacobian lens against Bayes beside the logit lens on the shipped wind-tunnel models.
# Run from the repository root; one thread (the machine's two cores are shared with training runs).
# Writes figures/readme/jacobian-lens/MODEL/jacobian-lens.{pdf,html,json}; timings in make.log.
export OMP_NUM_THREADS=1
for model in bijection-transformer-cpu bijection-mamba-cpu bijection-lstm-cpu bijection-mlp-cpu \
             hmm-transformer-cpu hmm-mamba-cpu hmm-lstm-cpu hmm-mlp-cpu; do
  start=$(date +%s)
  interp run jacobian-lens --ckpt "$model" --out figures/readme/jacobian-lens --n 500 --n-fit 200
  echo "$model: $(( $(date +%s) - start )) s"
done
