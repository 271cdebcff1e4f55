#!/bin/sh
# The same-position variant (--same-position true: d h_{L-1,t} / d h_{l,t} only, no effects on later positions)
# on two transformers, beside jacobian-lens.sh's TransformerLens definition. Writes
# figures/readme/jacobian-lens/same-position/MODEL/; the shipped run's times are in
# figures/readme/jacobian-lens/make-same-position.log.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
for model in bijection-transformer-cpu hmm-transformer-cpu; do
  start=$(date +%s)
  interp run jacobian-lens --ckpt "$model" --out figures/readme/jacobian-lens/same-position --n 500 --n-fit 200 \
    --same-position true
  echo "$model: $(( $(date +%s) - start )) s"
done
