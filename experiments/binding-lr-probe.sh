#!/usr/bin/env bash
# History: a run on a lent GPU machine, from the repository root there ($OUT: the folder whose files come
# back; .whl/: this package's wheels). Its records are under figures/readme/equal-footing/ (experiments/README.md).
# One device call: the project's GPU check, and beside its correctness sections (paused during its timed
# sections) an lr probe of binding's easiest cell: 8 pairs from pools of 256, every key queried.
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformer_lens, interp.cli, analyses.base, models, tasks; print('imports ok, torch', torch.__version__, transformer_lens.__version__ if hasattr(transformer_lens,'__version__') else '')" || exit 4
DEADLINE=$((T0 + ${BUDGET:-560}))
mkdir -p /tmp/probe
CELL="-T N=8 -T slots=8 -T fillers=4 -T queries=8 -T gap=0 -T ask=every"
pids=()
for lr in 3.2e-4 1e-3 3.2e-3; do
  for arch in mamba transformer; do
    if [ $arch = mamba ]; then M="-M ssm_weight_decay=false -M norm_eps=1e-5"; else M="-M shift=null"; fi
    OMP_NUM_THREADS=2 python3 -m interp train --task recall --arch $arch $M --steps 20000 --batch-size 256 --lr $lr \
      --warmup 200 --eval-every 250 --eval-size 512 --checkpoint-every 1000 --curriculum '[]' $CELL --device cuda \
      --out /tmp/probe/$arch-lr$lr > /tmp/probe/$arch-lr$lr.log 2>&1 &
    pids+=($!)
  done
done
python3 benchmarks/gpu_check.py > $OUT/gpu_check.log 2>&1 &
check=$!
paused=0
while kill -0 $check 2>/dev/null; do
  if [ $paused = 0 ] && grep -q "== parallel scan" $OUT/gpu_check.log; then kill -STOP "${pids[@]}"; paused=1; echo "probes paused at $(( $(date +%s) - T0 )) s"; fi
  sleep 1
done
wait $check; echo "gpu_check exit $? at $(( $(date +%s) - T0 )) s"
kill -CONT "${pids[@]}" 2>/dev/null
while [ $(date +%s) -lt $DEADLINE ]; do sleep 2; done
kill -INT "${pids[@]}" 2>/dev/null; sleep 8; kill -9 "${pids[@]}" 2>/dev/null
cd /tmp/probe && for d in */; do d=${d%/}; last=$(ls $d/checkpoints | tail -1); tar rf $OUT/probe.tar $d.log $d/run.json $d/metrics.jsonl $d/checkpoints/$last 2>/dev/null; done
ls -la $OUT; tail -n 30 $OUT/gpu_check.log
for f in /tmp/probe/*/metrics.jsonl; do echo "$f: $(grep eval_accuracy $f | tail -1 | cut -c1-220)"; done
