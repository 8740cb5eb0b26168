#!/usr/bin/env bash
# gpu-check.sh - everything that needs a GPU, in one call, for a device session:
#   RETRO_CUDA_ARCHITECTURES=90 OUT=/some/dir bash scripts/gpu-check.sh
# Builds with CUDA from this checkout alone (no Debian packages needed), runs
# every CUDA test and benchmark and the CPU suite beside them, and writes the
# logs and a summary under $OUT (default ./out/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu-check}"
mkdir -p "$out"
export RETRO_CUDA_ARCHITECTURES="${RETRO_CUDA_ARCHITECTURES:-native}"
{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv 2>&1
  nvcc --version | tail -2
  cmake --version | head -1
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

status=0
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: ok (architectures $RETRO_CUDA_ARCHITECTURES)"

./build-gpu/retrograd report --json > "$out/report.json" 2>&1; cat "$out/report.json"
: > "$out/summary.txt"
for t in build-gpu/test_*; do
  name=$(basename "$t")
  RG_TEST_QUICK=1 "$t" > "$out/$name.log" 2>&1; rc=$?
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$name.log" | tail -1)
  echo "$name: rc=$rc $line" | tee -a "$out/summary.txt"
  [ "$rc" = 0 ] || status=1
done
echo "--- test_cuda (verbatim)"; cat "$out/test_cuda.log"
for b in build-gpu/bench_*; do
  [ -x "$b" ] || continue
  "$b" > "$out/$(basename "$b").log" 2>&1 || status=1
done
exit $status
