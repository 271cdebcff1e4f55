#!/bin/sh
# The same-position variant (--same-position true: d h_{L-1,t} / d h_{l,t} only, no effects on later positions)
# on two transformers, beside make.sh's TransformerLens definition. Run from the repository root.
export OMP_NUM_THREADS=1
for model in bijection-transformer-cpu hmm-transformer-cpu; do
  start=$(date +%s)
  interp run jacobian-lens --ckpt "$model" --out figures/readme/jacobian-lens/same-position --n 500 --n-fit 200 \
    --same-position true
  echo "$model: $(( $(date +%s) - start )) s"
done
