#!/usr/bin/env bash
# Reproduces models/gemma4-demo (docs/demo_model/README.md): four seeded stages of
# tools/train_demo_model.py with Debian's python3-torch on CPU, 1 thread each.
#   stage 1: the first demo model, from scratch (tokenizer, formats, capitals);
#   stage 2: from stage 1, mostly arithmetic at a higher learning rate (held-out 17 % -> 95 %);
#   stage 3: from stage 2, a short tools-heavy run (copying the city into the call and answer);
#   stage 4: from stage 3, greetings and out-of-skill questions answered with the skills text,
#            the other skills' data still in the mix so they keep.
# Usage: tools/demo_model/train.sh [WORK_DIR]   (default: a temporary folder; writes the model
# to models/gemma4-demo, the stage 2/3 logs and loss curves to docs/demo_model/stage2|3 and
# stage 4's to docs/demo_model/)
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK="${1:-$(mktemp -d)}"
export OMP_WAIT_POLICY=PASSIVE
PY=(/usr/bin/python3 tools/train_demo_model.py)
COMMON=(--batch-tokens 1800 --copy-weight 5 --result-weight 5 --weight-decay 0.1)
mkdir -p "$WORK/s1" "$WORK/s2" "$WORK/s3" docs/demo_model/stage2 docs/demo_model/stage3
"${PY[@]}" --out "$WORK/s1/model" --docs "$WORK/s1" --log "$WORK/s1/training_log.txt"
cp "$WORK/s1/training_log.txt" docs/demo_model/stage1_training_log.txt
cp "$WORK/s1/loss.tsv" docs/demo_model/stage1_loss.tsv
cp "$WORK/s1/loss_curve.png" docs/demo_model/stage1_loss_curve.png
"${PY[@]}" --init "$WORK/s1/model" --out "$WORK/s2/model" --docs docs/demo_model/stage2 \
  --log docs/demo_model/stage2/training_log.txt --steps 2000 --lr 3e-3 --warmup 50 \
  --mix arith=0.82,arith_think=0.04,capital=0.03,call=0.055,answer=0.055 --eval-every 250 \
  "${COMMON[@]}"
"${PY[@]}" --init "$WORK/s2/model" --data-seed 1236 --compact-tool-results \
  --out "$WORK/s3/model" \
  --docs docs/demo_model/stage3 --log docs/demo_model/stage3/training_log.txt --steps 300 \
  --lr 1e-3 --warmup 20 --mix arith=0.4,arith_think=0.05,capital=0.05,call=0.25,answer=0.25 \
  --eval-every 100 "${COMMON[@]}"
"${PY[@]}" --init "$WORK/s3/model" --data-seed 1237 --compact-tool-results \
  --out models/gemma4-demo \
  --docs docs/demo_model --log docs/demo_model/training_log.txt --steps 1200 --lr 1e-3 \
  --warmup 50 --mix skills=0.3,arith=0.42,arith_think=0.05,capital=0.07,call=0.08,answer=0.08 \
  --eval-every 200 "${COMMON[@]}"
