#!/usr/bin/env bash
# demo.sh - the main job on the bundled default. Today: build, write the tiny
# qwen2 fixtures (f32, f16, bf16 and the f32 twins) and describe one of them.
# It becomes the fine-tuning demo once training lands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build
mkdir -p out
for t in f32 f16 bf16; do ./build/retrograd make-tiny --arch qwen2 --type "$t" -o "out/tiny-qwen2-$t.gguf"; done
./build/retrograd make-tiny --arch qwen2 --type f16 --twin-f32 -o out/tiny-qwen2-f16-twin-f32.gguf
./build/retrograd make-tiny --arch qwen2 --type bf16 --twin-f32 -o out/tiny-qwen2-bf16ctl-f32.gguf
echo
./build/retrograd info out/tiny-qwen2-f16.gguf
echo
./build/retrograd report
