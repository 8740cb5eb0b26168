#!/usr/bin/env bash
# gpu-check.sh - everything that needs a GPU, in one call, for a device session:
#   RETRO_CUDA_ARCHITECTURES=90 OUT=/some/dir bash scripts/gpu-check.sh
# Builds build-gpu with RG_CUDA=ON from this checkout alone (no Debian packages
# needed: no BLAS, the CPU side uses its own GEMM; cmake may be the pip one),
# runs every test binary and benchmark, and writes under $OUT (default
# ./out/gpu-check): env.txt, configure.log, build.log, report.json, one log per
# test and bench, summary.txt. test_cuda's output is printed verbatim, and the
# last line is the summary: "gpu-check: PASS ..." or "gpu-check: FAIL ...".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-out/gpu-check}"
mkdir -p "$out"
export RETRO_CUDA_ARCHITECTURES="${RETRO_CUDA_ARCHITECTURES:-native}"
TEST_TIMEOUT="${TEST_TIMEOUT:-300}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-120}"

# Tools: nvcc from the CUDA install when it is not on PATH; cmake from PATH or
# from the Python package of that name.
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
cmake_bin=$(command -v cmake 2>/dev/null)
if [ -z "$cmake_bin" ]; then
  cmake_bin=$(python3 -c 'import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, "cmake"))' 2>/dev/null)
fi
gen=()
if [ ! -f build-gpu/CMakeCache.txt ]; then
  if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja)
  elif ! command -v make >/dev/null 2>&1 && python3 -c 'import ninja' 2>/dev/null; then
    ninja_dir=$(python3 -c 'import ninja; print(ninja.BIN_DIR)')
    export PATH="$ninja_dir:$PATH"; gen=(-G Ninja)
  fi
fi

{
  echo "date: $(date -u)"
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  echo "cmake: ${cmake_bin:-not found} $("${cmake_bin:-false}" --version 2>/dev/null | head -1)"
  echo "generator: ${gen[*]:-default}"
  echo "RETRO_CUDA_ARCHITECTURES=$RETRO_CUDA_ARCHITECTURES"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

fail_early() {  # a failure before any test ran: still end with the summary line
  echo "gpu-check: FAIL $1 (logs in $out)" | tee -a "$out/summary.txt"
  exit 1
}
[ -n "$cmake_bin" ] || fail_early "no cmake (neither on PATH nor the cmake Python package)"
command -v nvcc >/dev/null 2>&1 || fail_early "no nvcc (not on PATH, not in /usr/local/cuda/bin)"

"$cmake_bin" -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=ON > "$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; fail_early "configure (see configure.log)"; }
"$cmake_bin" --build build-gpu -j"$(nproc)" > "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; fail_early "build (see build.log)"; }
echo "build: ok (architectures $RETRO_CUDA_ARCHITECTURES)"

status=0
./build-gpu/retrograd report --json > "$out/report.json" 2>&1 || status=1
cat "$out/report.json"

: > "$out/summary.txt"
n_bin=0 n_pass=0 n_fail=0 n_skip=0 bad_bins=""
for t in build-gpu/test_*; do
  { [ -x "$t" ] && [ -f "$t" ]; } || continue
  name=$(basename "$t")
  n_bin=$((n_bin + 1))
  RG_TEST_QUICK=1 timeout "$TEST_TIMEOUT" "$t" > "$out/$name.log" 2>&1; rc=$?
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$name.log" | tail -1)
  echo "$name: rc=$rc ${line:-(no summary line)}" | tee -a "$out/summary.txt"
  if [ -n "$line" ]; then
    n_pass=$((n_pass + $(awk '{print $1}' <<<"$line")))
    n_fail=$((n_fail + $(awk '{print $3}' <<<"$line")))
    n_skip=$((n_skip + $(awk '{print $5}' <<<"$line")))
  fi
  if [ "$rc" != 0 ] || [ -z "$line" ]; then status=1; bad_bins="$bad_bins $name"; fi
done
echo "--- test_cuda (verbatim)"
cat "$out/test_cuda.log" 2>/dev/null || echo "(no test_cuda log)"
echo "--- end test_cuda"

n_bench=0 bad_bench=""
for b in build-gpu/bench_*; do
  { [ -x "$b" ] && [ -f "$b" ]; } || continue
  n_bench=$((n_bench + 1))
  timeout "$BENCH_TIMEOUT" "$b" > "$out/$(basename "$b").log" 2>&1; rc=$?
  echo "$(basename "$b"): rc=$rc" | tee -a "$out/summary.txt"
  [ "$rc" = 0 ] || { status=1; bad_bench="$bad_bench $(basename "$b")"; }
done

cuda_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/test_cuda.log" 2>/dev/null | tail -1)
verdict=PASS
[ "$status" = 0 ] || verdict=FAIL
summary="gpu-check: $verdict - $n_bin test binaries: $n_pass passed, $n_fail failed, $n_skip skipped; test_cuda: ${cuda_line:-no summary}; $n_bench benches${bad_bench:+, failed:$bad_bench}${bad_bins:+; failing binaries:$bad_bins} (logs in $out)"
echo "$summary" | tee -a "$out/summary.txt"
exit $status
