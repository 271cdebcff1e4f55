#!/usr/bin/env bash
# Paper III's measurements on a packaged language model, at the analyses' defaults (50 prompts per number of shown
# examples, alpha 0.9, seed 0, 200 bootstrap resamples, 10 random axes), into figures/readme/MODEL/:
#   two-label-mixed/  calibration, value-manifold, key-orthogonality, attention-focusing, entropy-axis (last layer),
#                     activation-patching (every cell estimated, the 32 largest measured), path-patching (the read-out)
#   coin/             calibration, value-manifold, attention-focusing, entropy-axis
#   two-label-math/   calibration, value-manifold
#   two-label-mixed-flip7/ activation-patching and path-patching with the last of the 8 shown labels flipped (--index 7)
#   two-label-mixed-layer15/ (SmolLM2) or -layerN/ (the middle layer of any other model): entropy-axis there
# Each file is OUT/<prompts>/MODEL/<analysis>.json with its PNG figures beside it; the language-models results page
# reads them; then the Jacobian lens on the two-label mixed prompts (J fitted on 10 prompts: 1,360 CPU s on SmolLM2-135M,
# 1,537 on Gemma 3 270M, measured on the shared 2-core development CPU). Usage:
# experiments/language-models.sh smollm2-135m|gemma3-270m. The analyses before the lens are not yet timed as a whole.
set -eu
cd "$(dirname "$0")/.."
M=${1:?usage: experiments/language-models.sh MODEL (smollm2-135m or gemma3-270m)}
O=figures/readme/$M
middle=$(python -c "import interp; print(interp.load_language_model('$M').model.cfg.n_layers // 2)" | tail -n 1)   # TransformerLens prints a line of its own first
for a in calibration value-manifold key-orthogonality attention-focusing entropy-axis activation-patching path-patching; do
  interp run $a --model "$M" --prompts two-label --words mixed --format json,png --out "$O/two-label-mixed"; done
for a in calibration value-manifold attention-focusing entropy-axis; do
  interp run $a --model "$M" --prompts coin --format json,png --out "$O/coin"; done
for a in calibration value-manifold; do
  interp run $a --model "$M" --prompts two-label --words math --format json,png --out "$O/two-label-math"; done
interp run activation-patching --model "$M" --prompts two-label --words mixed --index 7 --format json,png --out "$O/two-label-mixed-flip7"
interp run path-patching --model "$M" --prompts two-label --words mixed --index 7 --format json --out "$O/two-label-mixed-flip7"
interp run entropy-axis --model "$M" --layer "$middle" --format json,png --out "$O/two-label-mixed-layer$middle"
interp run jacobian-lens --model "$M" --prompts two-label --words mixed --format json,png --out "$O/two-label-mixed"
