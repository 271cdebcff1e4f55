#!/usr/bin/env bash
# History: a run on a lent GPU machine, from the repository root there ($OUT: the folder whose files come
# back; .whl/: this package's wheels). Its records are under figures/readme/equal-footing/ (experiments/README.md).
# One device call: the project's GPU check alone, then the binding mixture continued on the GPU, batch 256,
# from the CPU runs' latest checkpoints: Mamba with the shift (CPU continuation step 4,000), Mamba with its
# conv alone (the GPU run's step 1,750) at two rates, and the paper's transformer after its pool-16 stage
# (step 4,000, 1,000 steps into the mixture) at two rates. Killed at the deadline; checkpoints every 200 steps.
# The starting checkpoints travelled under .gpurun/ck/ (ignored by git); under
# figures/readme/equal-footing/binding-dense-mix/ they are
# mamba-shift = mamba-from8-gpu-cpu/step-00004000, mamba-noshift = mamba-noshift-gpu/step-00001750 and
# transformer = transformer-pool16/step-00004000 (the records' run.json name them so).
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
DEADLINE=$((T0 + ${BUDGET:-550}))
python3 benchmarks/gpu_check.py > $OUT/gpu_check.log 2>&1; echo "gpu_check exit $? at $(( $(date +%s) - T0 )) s"
R=/tmp/runs; mkdir -p $R
MIX='[[100000, [{"N":8,"slots":8,"fillers":4,"queries":8,"gap":0,"ask":"every"},{"N":16,"slots":16,"fillers":8,"queries":16,"gap":0,"ask":"every"},{"N":32,"slots":32,"fillers":16,"queries":32,"gap":0,"ask":"every"},{"queries":64,"gap":0,"ask":"every"},{}]]]'
MAMBA="--arch mamba -M ssm_weight_decay=false -M norm_eps=1e-5"
TF="--arch transformer -M shift=null -M positional=learned -M tied=false -M n_ctx=480"
pids=()
mix() {  # name, then interp train options
  local name=$1; shift
  OMP_NUM_THREADS=2 python3 -m interp train --task recall --batch-size 256 --device cuda --out $R/$name \
    --steps 100000 --warmup 100 --eval-every 200 --eval-size 512 --checkpoint-every 200 --curriculum "$MIX" "$@" > $R/$name.log 2>&1 &
  pids+=($!)
}
mix gpu2-mamba-shift-lr1.6e-3 $MAMBA --lr 1.6e-3 --init .gpurun/ck/mamba-shift.safetensors
mix gpu2-mamba-noshift-lr1.6e-3 $MAMBA -M shift=null --lr 1.6e-3 --init .gpurun/ck/mamba-noshift.safetensors
mix gpu2-mamba-noshift-lr3.2e-3 $MAMBA -M shift=null --lr 3.2e-3 --init .gpurun/ck/mamba-noshift.safetensors
mix gpu2-transformer-lr1e-3 $TF --lr 1e-3 --init .gpurun/ck/transformer.safetensors
mix gpu2-transformer-lr2e-3 $TF --lr 2e-3 --init .gpurun/ck/transformer.safetensors
sleep 60; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
while [ $(date +%s) -lt $DEADLINE ]; do sleep 2; done
kill -9 "${pids[@]}" 2>/dev/null; sleep 1
cd $R && for d in */; do d=${d%/}; last=$(ls $d/checkpoints 2>/dev/null | tail -1); tar rf $OUT/runs.tar $d.log $d/run.json $d/metrics.jsonl ${last:+$d/checkpoints/$last} 2>/dev/null; done
tail -n 24 $OUT/gpu_check.log
for f in $R/*/metrics.jsonl; do echo "$f: $(grep eval_accuracy $f | tail -1 | cut -c1-160)"; done
