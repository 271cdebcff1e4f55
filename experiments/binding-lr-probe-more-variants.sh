#!/usr/bin/env bash
# History: a run on a lent GPU machine, from the repository root there ($OUT: the folder whose files come
# back; .whl/: this package's wheels). Its records are under figures/readme/equal-footing/ (experiments/README.md).
# Second, short device call: six more probes of the 8-pair dense cell side by side for ~2 minutes (batch 256):
# Mamba with its conv alone at 3.2e-3 and 1e-2, Mamba with the shift at 1e-2, the plain transformer at 1e-2,
# the transformer with the shift at 1e-3 (a known binder: the control), the LSTM at 3.2e-3.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
T0=$(date +%s); DEADLINE=$((T0 + ${BUDGET:-105}))
mkdir -p /tmp/probe
CELL="-T N=8 -T slots=8 -T fillers=4 -T queries=8 -T gap=0 -T ask=every"
MAMBA="-M ssm_weight_decay=false -M norm_eps=1e-5"
pids=()
probe() {  # name arch lr options...
  local name=$1 arch=$2 lr=$3; shift 3
  OMP_NUM_THREADS=2 python3 -m interp train --task recall --arch $arch "$@" --steps 20000 --batch-size 256 --lr $lr \
    --warmup 200 --eval-every 100 --eval-size 512 --checkpoint-every 20000 --curriculum '[]' $CELL --device cuda \
    --out /tmp/probe/$name > /tmp/probe/$name.log 2>&1 &
  pids+=($!)
}
probe mamba-noshift-lr3.2e-3 mamba 3.2e-3 $MAMBA -M shift=null
probe mamba-noshift-lr1e-2 mamba 1e-2 $MAMBA -M shift=null
probe mamba-lr1e-2 mamba 1e-2 $MAMBA
probe transformer-lr1e-2 transformer 1e-2 -M shift=null
probe transformer-shift-lr1e-3 transformer 1e-3
probe lstm-lr3.2e-3 lstm 3.2e-3
while [ $(date +%s) -lt $DEADLINE ]; do sleep 2; done
kill -9 "${pids[@]}" 2>/dev/null; sleep 1
cd /tmp/probe && for d in */; do d=${d%/}; tar rf $OUT/probe2.tar $d/run.json $d/metrics.jsonl 2>/dev/null; done
for f in /tmp/probe/*/metrics.jsonl; do echo "$f: $(grep eval_accuracy $f | tail -1 | cut -c1-200)"; done
