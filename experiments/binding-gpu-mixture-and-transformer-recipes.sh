#!/usr/bin/env bash
# History: a run on a lent GPU machine, from the repository root there ($OUT: the folder whose files come
# back; .whl/: this package's wheels). Its records are under figures/readme/equal-footing/ (experiments/README.md).
# One device call: the project's GPU check, and beside its correctness sections (runs paused during its timed
# sections): (1) the binding mixture continued on the GPU from the CPU runs' checkpoints, Mamba with the shift
# (two rates) and Mamba with its conv alone; (2) what lets the plain transformer bind the 8-pair cell: five
# variants of its recipe at lr 1e-3, batch 256.
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformer_lens, interp.cli, analyses.base, models, tasks; print('imports ok, torch', torch.__version__)" || exit 4
DEADLINE=$((T0 + ${BUDGET:-545}))
R=/tmp/runs; mkdir -p $R
MIX='[[100000, [{"N":8,"slots":8,"fillers":4,"queries":8,"gap":0,"ask":"every"},{"N":16,"slots":16,"fillers":8,"queries":16,"gap":0,"ask":"every"},{"N":32,"slots":32,"fillers":16,"queries":32,"gap":0,"ask":"every"},{"queries":64,"gap":0,"ask":"every"},{}]]]'
MAMBA="-M ssm_weight_decay=false -M norm_eps=1e-5"
CELL="-T N=8 -T slots=8 -T fillers=4 -T queries=8 -T gap=0 -T ask=every"
pids=()
go() {  # name, then interp train options
  local name=$1; shift
  OMP_NUM_THREADS=2 python3 -m interp train --task recall --batch-size 256 --device cuda --out $R/$name "$@" > $R/$name.log 2>&1 &
  pids+=($!)
}
mix() { go "$@" --steps 100000 --warmup 100 --eval-every 250 --eval-size 512 --checkpoint-every 250 --curriculum "$MIX"; }
cell() { go "$@" --steps 20000 --lr 1e-3 --warmup 200 --eval-every 250 --eval-size 512 --checkpoint-every 20000 --curriculum '[]'; }
mix gpu-mamba-mix-lr1.6e-3 --arch mamba $MAMBA --lr 1.6e-3 --init figures/readme/equal-footing/binding-dense-mix/mamba-from8/step-00005000.safetensors
mix gpu-mamba-mix-lr3.2e-3 --arch mamba $MAMBA --lr 3.2e-3 --init figures/readme/equal-footing/binding-dense-mix/mamba-from8/step-00005000.safetensors
mix gpu-mamba-noshift-mix-lr1.6e-3 --arch mamba $MAMBA -M shift=null --lr 1.6e-3 --init figures/readme/equal-footing/binding-lr-probe/cpu-mamba-noshift-lr3.2e-3/step-00005000.safetensors
cell tf-learned --arch transformer -M shift=null -M positional=learned $CELL
cell tf-untied --arch transformer -M shift=null -M tied=false $CELL
cell tf-wide --arch transformer -M shift=null -M d_model=128 -M n_heads=4 $CELL
cell tf-4layers --arch transformer -M shift=null -M n_layers=4 $CELL
cell tf-compact --arch transformer -M shift=null -T layout=compact -T N=8 -T N_min=8 -T slots=8 -T fillers=0 -T gap=0 -T queries=8 -T ask=every
python3 benchmarks/gpu_check.py > $OUT/gpu_check.log 2>&1 &
check=$!
paused=0
while kill -0 $check 2>/dev/null; do
  if [ $paused = 0 ] && grep -q "== parallel scan" $OUT/gpu_check.log; then kill -STOP "${pids[@]}"; paused=1; echo "runs paused at $(( $(date +%s) - T0 )) s"; fi
  sleep 1
done
wait $check; echo "gpu_check exit $? at $(( $(date +%s) - T0 )) s"
kill -CONT "${pids[@]}" 2>/dev/null
while [ $(date +%s) -lt $DEADLINE ]; do sleep 2; done
kill -9 "${pids[@]}" 2>/dev/null; sleep 1
cd $R && for d in */; do d=${d%/}; last=$(ls $d/checkpoints 2>/dev/null | tail -1); tar rf $OUT/runs.tar $d.log $d/run.json $d/metrics.jsonl ${last:+$d/checkpoints/$last} 2>/dev/null; done
ls -la $OUT; tail -n 32 $OUT/gpu_check.log
for f in $R/*/metrics.jsonl; do echo "$f: $(grep eval_accuracy $f | tail -1 | cut -c1-200)"; done
