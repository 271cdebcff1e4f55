#!/bin/sh
# The Jacobian lens against Bayes beside the logit lens on the shipped wind-tunnel models.
# One thread (the machine's two cores are shared with training runs); about 45 minutes on a shared 2-core CPU.
# Writes figures/readme/jacobian-lens/MODEL/jacobian-lens.{pdf,html,json}; prints each model's time (the
# shipped run's are in figures/readme/jacobian-lens/make.log).
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
for model in bijection-transformer-cpu bijection-mamba-cpu bijection-lstm-cpu bijection-mlp-cpu \
             hmm-transformer-cpu hmm-mamba-cpu hmm-lstm-cpu hmm-mlp-cpu; do
  start=$(date +%s)
  interp run jacobian-lens --ckpt "$model" --out figures/readme/jacobian-lens --n 500 --n-fit 200
  echo "$model: $(( $(date +%s) - start )) s"
done
