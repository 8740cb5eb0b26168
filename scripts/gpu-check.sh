#!/usr/bin/env bash
# gpu-check.sh - everything that needs a GPU, in one unattended call on a lent machine:
#   RETRO_CUDA_ARCHITECTURES=90 OUT=/some/dir bash scripts/gpu-check.sh
#
# The steps, cheapest and most telling first, each with its own time limit inside a total
# budget (GPU_CHECK_BUDGET seconds, default 480: a lent GPU gives ~10 minutes, machine start
# included). A step the budget can no longer start is listed as skipped for time, not failed;
# a test that passes its limit fails, a benchmark cut by its limit keeps its finished rows and
# is listed apart (slow is not wrong). Run it with the caller's own timeout above the budget
# (e.g. 540 s for the default), so the summary line is always written.
#   1. build BUILD (GPU_CHECK_BUILD, default build-gpu) from this checkout alone: RG_CUDA=ON,
#      RG_OPENBLAS=OFF, RG_YAML=OFF (no Debian package needed; cmake and ninja may be the pip
#      ones); tests and benchmarks included
#   1a. llama.cpp's CUDA build (llama-bench, GGML_CUDA=ON, sm_90) in the background, from the
#      llama.cpp sources in .gpu-carry (LLAMA_SRC_TAR overrides), for step 6b
#   1b. the register table: scripts/cuda-kernel-table.sh print (each kernel's registers, shared
#      memory, spills and occupancy from the real nvcc compile) into kernel-table.txt and the
#      summary; said so when that script is not in the checkout
#   2. retrograd report --json --device cuda (a run without a usable device stops here: FAIL)
#   3. the CUDA test binaries on the GPU (RETRO_CUDA_HOST unset): test_cuda* (printed
#      verbatim), test_session, test_session_state, test_session_rewind(_recurrent), test_session_exact, test_train_device, test_device_memory, test_f16_base_training; then test_ops' CUDA parity table: an (op,
#      type) without a kernel is a known gap (counted), one over tolerance fails
#   3b. test_cuda under compute-sanitizer: memcheck, racecheck, synccheck, initcheck, each with
#      its own limit (API errors not reported: the tests provoke them on purpose). A report is a
#      FAIL with its first lines in the summary; a missing compute-sanitizer, or one that refuses
#      the device, is listed apart (not a failure), as is a run cut by its limit before any report
#      (a sanitizer slows kernels 10-100x: slow is not wrong)
#   3c. test_ops perf on the GPU: every op x type x shape row timed on the CPU and the device
#      (time, GB/s, GFLOP/s and their shares of each backend's peak) into test_ops-perf.log; the
#      slowest device rows and the lowest shares in the summary
#   4. tests/cli/test_cli_cuda.sh with RETRO_CUDA_HOST=0 (that script reads an unset variable
#      as the host execution)
#   5. make-tiny --shape smollm2 and --shape 1b in BF16 into a temporary folder, timed and
#      checked with info (the benchmarks make their F32 and F16 files there as they need them)
#   5b. retrograd train on the smollm2 shape's BF16 file on the CPU and on the device (tensor
#      path and RETRO_CUDA_HALF_GEMM=f32), 3 steps: the per-step losses against the CPU's
#   5c. memcheck and racecheck over the other test_cuda_* binaries, while the budget lasts
#   6. device benchmarks (RG_BENCH_DEVICE=cuda): bench_train's tiny and smollm2 shape rows
#      (2 timed steps, each row with a profiled step: time per op, fallbacks, copies);
#      bench_generate on the smollm2 and 1b BF16 files, and once with the profile; bench_train's
#      1b shape rows (1 timed step); bench_flash_attn's CUDA rows (FLASH_ATTN_EXT/BACK TF/s at
#      T = 4096, head_dim 64/128/256, causal and not, beside FA2's and FA3's published figures)
#   6b. issue 24's benchmarks (quantized models on the device), on the smollm2 and 1b shapes
#      quantized with `retrograd quantize F OUT Q4_K_M`: LoRA training tokens/s and MFU with
#      RETRO_REQUIRE_GPU_RESIDENT=1 (a refusal is reported, then the default row runs with its
#      fallbacks counted), the fused cross-entropy's device memory and time against the
#      materialized loss, prompt and generation tokens/s per weight type (F16 BF16 Q8_0 Q4_0
#      Q4_K_M IQ4_XS) beside llama.cpp's CUDA llama-bench on the same files (built in step 1a
#      from .gpu-carry's sources: scripts/fetch-llama-sdist.sh; said so and skipped without them)
#   7. every other test binary (the CPU suite; test_ops with the GPU hidden, its parity rows
#      being step 3's), RG_TEST_QUICK=1, while the budget lasts
# GPU_CHECK_ONLY=issue24 runs steps 1 (its targets only), 1a, 2, 5 and 6b alone, then the
# precision tables' CUDA column (test_f16_base_training, bench_precision): the call for issue
# 24's figures, e.g. GPU_CHECK_ONLY=issue24 GPU_CHECK_BUDGET=540 with the carry of .gpu-carry.
# Writes under $OUT (default ./out/gpu-check): env.txt, configure.log, build.log, report.json,
# one log per step, summary.txt. Progress lines go to stdout; the last line is the summary:
# "gpu-check: PASS ..." or "gpu-check: FAIL ...".
#
# GPU_CHECK_DRY=1 runs the whole script on a machine without a GPU, through the host execution
# of the CUDA code (RETRO_CUDA_HOST=1), at the smallest sizes, to check the script itself: the
# tiny-shape rows only (bench_train skips the larger shapes there), bench_generate on the tiny
# BF16 file (and per type on the tiny shape in step 6b, prompt 8 and 4 generated; llama-bench
# not built: no GPU), the 1b shape as a --dry-run listing, and two CPU test binaries; the sanitizer steps
# say "no GPU: skipped", and test_ops perf times the host execution (its cuda-host lines). Its
# figures are CPU timings, never GPU results, and its summary says so.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-out/gpu-check}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
dry="${GPU_CHECK_DRY:-0}"
only="${GPU_CHECK_ONLY:-}"  # issue24: the build, the report, the shapes and step 6b alone
case "$only" in "" | issue24) ;; *) echo "gpu-check: GPU_CHECK_ONLY='$only' is not issue24" >&2; exit 2 ;; esac
full() { [ -z "$only" ]; }
budget="${GPU_CHECK_BUDGET:-480}"
build="${GPU_CHECK_BUILD:-build-gpu}"
deadline=$((SECONDS + budget))
export RETRO_CUDA_ARCHITECTURES="${RETRO_CUDA_ARCHITECTURES:-native}"
if [ "$dry" = 1 ]; then export RETRO_CUDA_HOST=1; else unset RETRO_CUDA_HOST; fi
shapes=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-shapes.XXXXXX")
llama_pid=""
trap 'rm -rf "$shapes"; [ -n "$llama_pid" ] && kill -TERM "$llama_pid" 2>/dev/null' EXIT
: > "$out/summary.txt"

# ---------------------------------------------------------------------------
# Steps and their records.
failed_steps="" skipped_steps="" timed_out="" not_run="" n_bin=0 n_pass=0 n_fail=0 n_skip=0

say() { echo "$*" | tee -a "$out/summary.txt"; }
stamp() { printf '%4ds' "$((SECONDS - deadline + budget))"; }

# run NAME LIMIT LOG CMD...: CMD with at most LIMIT seconds (fewer when the budget has fewer
# left), stdout and stderr into $out/LOG. Sets rc (124: timed out) and took (seconds); returns
# 1 without running when the budget cannot start it (the step is then listed as skipped).
run() {
  local name="$1" limit="$2" log="$out/$3"; shift 3
  local left=$((deadline - SECONDS - 10))
  if [ "$left" -lt 20 ]; then
    say "[$(stamp)] $name: skipped for time (budget ${budget}s)"; skipped_steps="$skipped_steps $name"; return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "[$(stamp)] $name (at most ${limit}s) ..."
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$log" 2>&1; rc=$?
  took=$((SECONDS - t0))
  [ "$rc" = 137 ] && rc=124
  return 0
}

# verdict NAME OK DETAIL: one summary line per step; OK 0 passes.
verdict() {
  local name="$1" ok="$2" detail="$3"
  if [ "$rc" = 124 ]; then detail="TIMEOUT after ${took}s${detail:+; $detail}"; ok=1; fi
  if [ "$ok" = 0 ]; then say "  $name: ok in ${took}s${detail:+ - $detail}"
  else
    say "  $name: FAIL$([ "$rc" != 0 ] && echo " (rc=$rc)") in ${took}s${detail:+ - $detail}"
    failed_steps="$failed_steps $name"
  fi
}

# test_bin LIMIT [VAR=VALUE...] BIN: a test binary (RG_TEST_QUICK=1 and the given variables),
# counted by its "N passed, N failed, N skipped" line.
test_bin() {
  local limit="$1"; shift
  local envs=(RG_TEST_QUICK=1)
  while [[ "$1" == *=* ]]; do envs+=("$1"); shift; done
  local bin="$1" name; name=$(basename "$1")
  run "$name" "$limit" "$name.log" env "${envs[@]}" "$bin" || return 0
  local log="$name.log"
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$log" | tail -1)
  n_bin=$((n_bin + 1))
  if [ -n "$line" ]; then
    n_pass=$((n_pass + $(awk '{print $1}' <<<"$line"))); n_fail=$((n_fail + $(awk '{print $3}' <<<"$line")))
    n_skip=$((n_skip + $(awk '{print $5}' <<<"$line")))
  fi
  verdict "$name" "$([ "$rc" = 0 ] && [ -n "$line" ] && echo 0 || echo 1)" "${line:-no summary line}"
}

# bench NAME LIMIT VAR=VALUE... -- CMD...: a benchmark; its rows follow in the summary (bench_train's
# results, refusals, skips, made files and fallback counts; bench_generate's device and rows). A
# benchmark cut by its limit is listed apart and does not fail the check (a test's timeout does).
bench() {
  local name="$1" limit="$2"; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local log="bench-${name// /-}.log"
  run "$name" "$limit" "$log" env "${envs[@]}" "$@" || return 0
  if [ "$rc" = 124 ]; then  # slow is not wrong: the rows so far are kept, the verdict is not changed
    say "  $name: TIMEOUT after ${took}s (the rows it finished follow; log $log)"; timed_out="$timed_out $name"
  else
    verdict "$name" "$rc" "log $log"
  fi
  grep -E 'tok/s +\(best|refused by|rows: skipped|failed:|^\(made |^  step graph:|^device:|^file | (caus|full) \||HOST EXECUTION|TF/s  |^peaks:|^  device memory:|^  must be resident|^  loss:|^(f16|bf16|q8_0|q4_0|q4_k_m|iq4_xs) |on the device: the token graph|^bench_precision:|^(AdamW|SGD), |^  (worst|elements|relative) ' "$out/$log" |
    cut -c1-220 | sed 's/^/    /' | tee -a "$out/summary.txt"
}

# sanitize TOOL LIMIT BIN: BIN (RG_TEST_QUICK=1) under compute-sanitizer --tool TOOL, into
# sanitize-TOOL-BIN.log. API errors are not reported where the sanitizer can be told so (the
# tests provoke failing calls on purpose and check them). A report is a FAIL with its first
# lines in the summary; no sanitizer, no GPU (GPU_CHECK_DRY) or a sanitizer that refuses the
# device (it stops before its ERROR SUMMARY with an "Error:" line of its own) is listed apart.
# (sanitizer and sanitizer_opts: found in step 0)
sanitize() {
  local tool="$1" limit="$2" bin="$3" base name log
  base=$(basename "$bin"); name="$tool $base"; log="sanitize-$tool-$base.log"
  if [ "$dry" = 1 ]; then say "  $name: no GPU: skipped (GPU_CHECK_DRY)"; not_run="$not_run $tool-$base"; return; fi
  if [ -z "$sanitizer" ]; then
    say "  $name: not run: compute-sanitizer not found (PATH, beside nvcc, /usr/local/cuda/compute-sanitizer)"; not_run="$not_run $tool-$base"; return
  fi
  run "$name" "$limit" "$log" env RG_TEST_QUICK=1 "$sanitizer" --tool "$tool" ${sanitizer_opts[@]+"${sanitizer_opts[@]}"} --print-limit 20 \
    --error-exitcode 99 "$bin" || return 0
  local f="$out/$log" errors reports tests
  errors=$(sed -nE 's/^========= ERROR SUMMARY: ([0-9]+) error.*/\1/p' "$f" | tail -1)
  # The reports: the sanitizer's own lines, less its banner and summaries.
  reports=$(grep -E '^========= ' "$f" | grep -vE '^========= (COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY)' | grep -v '^========= *$')
  tests=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$f" | tail -1)
  if [ -z "$errors" ] && [ "$rc" != 124 ] && grep -qE '^========= (Error|Internal error)' "$f"; then
    say "  $name: not run: compute-sanitizer refused: $(grep -m1 -E '^========= (Error|Internal error)' "$f" | cut -c11-200)"
    not_run="$not_run $tool-$base"
  elif [ "${errors:-0}" -gt 0 ] || [ "$rc" = 99 ] || { [ "$rc" = 124 ] && [ -n "$reports" ]; }; then
    verdict "$name" 1 "${errors:-some} sanitizer errors${tests:+; $tests}; log $log"
    head -12 <<<"$reports" | cut -c1-220 | sed 's/^/    /' | tee -a "$out/summary.txt"
  elif [ "$rc" = 124 ]; then
    say "  $name: TIMEOUT after ${took}s with no report so far (listed apart: slow is not wrong; log $log)"
    timed_out="$timed_out $tool-$base"
  else
    verdict "$name" "$([ "$rc" = 0 ] && [ -n "$errors" ] && echo 0 || echo 1)" \
      "${errors:+$errors sanitizer errors; }${tests:-no test summary line}"
  fi
}

# perf_summary LOG: test_ops perf's peaks, its slowest device rows and the device rows furthest
# below the FP32 peak (the lines are '|'-separated: 5 the median time, 8 the FLOP rate, 9 its share;
# the backend column says cuda-host for the host execution).
perf_summary() {
  local log="$1"
  grep -E '^(peak |RETRO_CUDA_HOST)' "$log" | cut -c1-240 | sed 's/^/    /'
  echo "    slowest device rows (median time per run):"
  grep -E '^  cuda' "$log" | grep -E ' us x ' | sort -t'|' -k5,5bgr | head -8 | perf_short
  echo "    furthest below the device's FP32 peak (rows with a FLOP count, by GFLOP/s):"
  grep -E '^  cuda' "$log" | grep -E ' us x ' | awk -F'|' '$9 ~ /%/' | sort -t'|' -k8,8bg | head -8 | perf_short
}
perf_short() { sed -E 's/ *\| host execution: a CPU timing, not a GPU result//; s/  +/ /g; s/^/    /' | cut -c1-220; }

finish() {
  local verdict=PASS
  [ -n "$failed_steps" ] && verdict=FAIL
  local where="GPU mode"
  [ "$dry" = 1 ] && where="GPU_CHECK_DRY: the host execution of the CUDA code, not a GPU; its figures are CPU timings"
  say "gpu-check: $verdict - $where; $n_bin test binaries: $n_pass passed, $n_fail failed, $n_skip skipped${failed_steps:+; failed:$failed_steps}${timed_out:+; cut by their time limit:$timed_out}${not_run:+; not run (not a failure):$not_run}${skipped_steps:+; skipped for time:$skipped_steps}; $((SECONDS - deadline + budget))s of ${budget}s (logs in $out)"
  [ "$verdict" = PASS ]
  exit $?
}

# ---------------------------------------------------------------------------
# 0. The machine and the tools: nvcc from the CUDA install when it is not on PATH; cmake and
# ninja from PATH or from the Python packages of those names.
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
sanitizer="" sanitizer_opts=()
for cand in "$(command -v compute-sanitizer 2>/dev/null)" "$(dirname "$(command -v nvcc 2>/dev/null || echo .)")/compute-sanitizer" \
            /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -n "$cand" ] && [ -x "$cand" ] && { sanitizer="$cand"; break; }
done
if [ -n "$sanitizer" ] && "$sanitizer" --help 2>/dev/null | grep -q -- '--report-api-errors'; then
  sanitizer_opts=(--report-api-errors no)
fi
cmake_bin=$(command -v cmake 2>/dev/null)
[ -n "$cmake_bin" ] || cmake_bin=$(python3 -c 'import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, "cmake"))' 2>/dev/null)
gen=()
if [ ! -f "$build/CMakeCache.txt" ]; then
  if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja)
  elif ! command -v make >/dev/null 2>&1 && python3 -c 'import ninja' 2>/dev/null; then
    export PATH="$(python3 -c 'import ninja; print(ninja.BIN_DIR)'):$PATH"; gen=(-G Ninja)
  fi
fi
{
  echo "date: $(date -u)"
  echo "checkout: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "mode: $([ "$dry" = 1 ] && echo 'GPU_CHECK_DRY=1 (host execution of the CUDA code)' || echo GPU)"
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  echo "compute-sanitizer: ${sanitizer:-not found} $("${sanitizer:-false}" --version 2>/dev/null | grep -m1 -i version)"
  echo "cmake: ${cmake_bin:-not found} $("${cmake_bin:-false}" --version 2>/dev/null | head -1)"
  echo "generator: ${gen[*]:-default}; cores: $(nproc); $(free -g 2>/dev/null | awk '/^Mem:/ {print "memory " $2 " GiB"}')"
  echo "RETRO_CUDA_ARCHITECTURES=$RETRO_CUDA_ARCHITECTURES budget=${budget}s build=$build"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
[ -n "$cmake_bin" ] || { rc=1 took=0; verdict "tools" 1 "no cmake (neither on PATH nor the cmake Python package)"; finish; }

# 1. Build. Without nvcc the dry mode still builds the host execution (RG_CUDA=AUTO).
cuda_opt=ON
[ "$dry" = 1 ] && cuda_opt=AUTO
run "configure" 120 configure.log "$cmake_bin" -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DRG_CUDA=$cuda_opt \
  -DRG_OPENBLAS=OFF -DRG_YAML=OFF -DRG_WERROR=OFF && verdict "configure" "$rc" "$(grep -E 'retrograd: (CUDA|host)' "$out/configure.log" | tr '\n' ' ')"
[ -z "$failed_steps$skipped_steps" ] || { tail -30 "$out/configure.log"; finish; }
targets=()
full || targets=(--target retrograd --target bench_train --target bench_generate --target bench_precision \
                 --target test_f16_base_training)
run "build" 420 build.log "$cmake_bin" --build "$build" -j"$(nproc)" "${targets[@]}" &&
  verdict "build" "$rc" "architectures $RETRO_CUDA_ARCHITECTURES${only:+; GPU_CHECK_ONLY=$only: its targets only}"
[ -z "$failed_steps$skipped_steps" ] || { tail -40 "$out/build.log"; finish; }
bin="$build/retrograd"

# 1a. llama.cpp's CUDA build, for step 6b's comparison, started now in the background (nice 19, all
# cores but two) from the sources scripts/fetch-llama-sdist.sh puts in .gpu-carry (the device
# reaches no registry: carry that folder), under its own time limit; step 6b waits for it. Said so
# and skipped when the sources are absent, or without a GPU.
llama_tar="${LLAMA_SRC_TAR:-$(ls -t .gpu-carry/llama.cpp-*.tar.gz .gpu-carry/llama_cpp_python-*.tar.gz 2>/dev/null | head -1)}"
llama_build="${GPU_CHECK_LLAMA_BUILD:-build-llama}" llama_pid="" llama_bench="" llama_why=""
llama_build_bg() {  # llama_build_bg DIR TAR CMAKE GENERATOR: unpack, configure (CUDA, sm_90), build llama-bench
  local dir="$1" tar="$2" cm="$3" g=() src
  [ -n "$4" ] && g=(-G "$4")
  rm -rf "$dir" && mkdir -p "$dir/src" && tar xzf "$tar" -C "$dir/src" || return 1
  src=$(find "$dir/src" -maxdepth 4 -path '*llama.cpp/CMakeLists.txt' | head -1)
  [ -n "$src" ] || { echo "no llama.cpp/CMakeLists.txt in $tar"; return 1; }
  "$cm" -S "$(dirname "$src")" -B "$dir/b" "${g[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${LLAMA_CUDA_ARCHITECTURES:-90}" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF || return 1
  "$cm" --build "$dir/b" --target llama-bench -j"$(( $(nproc) > 4 ? $(nproc) - 2 : 2 ))"
}
if [ "$dry" = 1 ]; then
  llama_why="no GPU (GPU_CHECK_DRY)${llama_tar:+; sources found: $llama_tar}"
elif [ -z "$llama_tar" ] || [ ! -f "$llama_tar" ]; then
  llama_why="no llama.cpp sources in .gpu-carry (run scripts/fetch-llama-sdist.sh, then carry .gpu-carry)"
else
  llama_gen=""
  command -v ninja >/dev/null 2>&1 && llama_gen=Ninja
  llama_limit=$((deadline - SECONDS - 120)); [ "$llama_limit" -gt 540 ] && llama_limit=540
  if [ "$llama_limit" -lt 60 ]; then llama_why="no time left in the budget to build it"
  else
    echo "[$(stamp)] llama.cpp CUDA build from $llama_tar (background, at most ${llama_limit}s) ..."
    nice -n 19 timeout -k 10 "$llama_limit" bash -c "$(declare -f llama_build_bg); llama_build_bg \"\$@\"" _ \
      "$llama_build" "$llama_tar" "$cmake_bin" "$llama_gen" > "$out/llama-build.log" 2>&1 &
    llama_pid=$!
  fi
fi

if full; then  # 1b
# 1b. The register table (h-limits' scripts/cuda-kernel-table.sh: the checked-in table of the
# real nvcc compile, with each kernel's occupancy). No GPU needed; cheap, so it comes first.
if [ -f scripts/cuda-kernel-table.sh ]; then
  if run "kernel table" 60 kernel-table.txt bash scripts/cuda-kernel-table.sh print; then
    verdict "kernel table" "$rc" "$(grep -c . "$out/kernel-table.txt") lines in kernel-table.txt"
    head -150 "$out/kernel-table.txt" | sed 's/^/    /' | tee -a "$out/summary.txt"
    n=$(wc -l < "$out/kernel-table.txt")
    [ "$n" -gt 150 ] && say "    ... $((n - 150)) more lines in kernel-table.txt"
  fi
else
  say "  kernel table: not printed: scripts/cuda-kernel-table.sh is not in this checkout"
  not_run="$not_run kernel-table"
fi
fi  # 1b

# 2. The device.
run "report" 60 report.json "$bin" report --json --device cuda &&
  verdict "report" "$(grep -q '"device": "cuda"' "$out/report.json"; echo $?)" \
    "$(grep -oE '"(gpu_device|gpu_unavailable_reason)": [^,]*' "$out/report.json" | head -2 | tr '\n' ' ')"
case " $failed_steps " in *" report "*) finish ;; esac

if full; then  # 3-4
# 3. The CUDA test binaries, then the parity table.
for t in "$build"/test_cuda "$build"/test_cuda_* "$build"/test_session "$build"/test_session_state "$build"/test_session_rewind "$build"/test_session_rewind_recurrent "$build"/test_session_exact "$build"/test_session_seqs "$build"/test_engine "$build"/test_train_device "$build"/test_device_memory "$build"/test_f16_base_training; do
  [ -x "$t" ] && [ -f "$t" ] && test_bin 120 "$t"
done
echo "--- test_cuda (verbatim)"; cat "$out/test_cuda.log" 2>/dev/null || echo "(no test_cuda log)"; echo "--- end test_cuda"
if run "test_ops cuda parity" 150 test_ops-parity.log env RG_TEST_QUICK=1 "$build/test_ops" test_cuda_parity; then
  line=$(grep -E '^ +[0-9]+ rows: [0-9]+ without a CUDA kernel, [0-9]+ over their bound' \
    "$out/test_ops-parity.log" | tail -1 | sed 's/^ *//')
  over=$(sed -nE 's/.* ([0-9]+) over their bound.*/\1/p' <<<"$line")
  grep FAIL "$out/test_ops-parity.log" | grep -vE 'MISSING|^FAIL test_cuda_parity|tally.missing' > "$out/parity-failures.txt"
  verdict "test_ops cuda parity" "$([ "$over" = 0 ] && echo 0 || echo 1)" "${line:-no parity line} (a row without a kernel is a known gap)"
fi

# 3b. test_cuda under each compute-sanitizer tool.
for tool in memcheck racecheck synccheck initcheck; do
  sanitize "$tool" "$([ "$tool" = synccheck ] && echo 60 || echo 90)" "$build/test_cuda"
done

# 3c. The op table's perf mode on the device (on the host execution under GPU_CHECK_DRY).
if run "test_ops perf" 120 test_ops-perf.log env RG_TEST_QUICK=1 "$build/test_ops" perf; then
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/test_ops-perf.log" | tail -1)
  verdict "test_ops perf" "$([ "$rc" = 0 ] && [ -n "$line" ] && echo 0 || echo 1)" \
    "${line:-no summary line} (lines timed, failed, without a kernel; log test_ops-perf.log)"
  perf_summary "$out/test_ops-perf.log" | tee -a "$out/summary.txt"
fi

# 4. The commands on the device.
cli_host=0
[ "$dry" = 1 ] && cli_host=1
run "cli cuda" 180 test_cli_cuda.log env RETRO_CUDA_HOST=$cli_host bash tests/cli/test_cli_cuda.sh "$build" &&
  verdict "cli cuda" "$rc" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/test_cli_cuda.log" | tail -1)"
fi  # 3-4

# 5. The shapes.
make_shape() {  # make_shape SHAPE: the BF16 file, timed, checked with info
  local f="$shapes/$1-bf16.gguf"
  run "make-tiny --shape $1" 180 "make-tiny-$1.log" "$bin" make-tiny --arch llama --shape "$1" --type bf16 -o "$f" || return 0
  "$bin" info "$f" >> "$out/make-tiny-$1.log" 2>&1
  verdict "make-tiny --shape $1" "$rc" "$(grep -E '^parameters' "$out/make-tiny-$1.log" | tr -s ' '), $(du -h "$f" 2>/dev/null | cut -f1)"
}
make_shape smollm2
if [ "$dry" = 1 ]; then
  run "make-tiny --shape 1b --dry-run" 60 make-tiny-1b.log "$bin" make-tiny --arch llama --shape 1b --type bf16 \
    -o "$shapes/1b-bf16.gguf" --dry-run && verdict "make-tiny --shape 1b --dry-run" "$rc" "$(grep -E '^parameters' "$out/make-tiny-1b.log" | tr -s ' ')"
else
  make_shape 1b
fi

if full; then  # 5b-6
# 5b. Training on the device against the CPU on the same file: `retrograd train` on the
# smollm2 shape's BF16 file (the tiny BF16 fixture under GPU_CHECK_DRY), full fine-tuning in
# place, 3 steps of 128 tokens; per-step losses within 4u = 1.6e-2 relative on the tensor path
# (RETRO_CUDA_HALF_GEMM=tensor rounds the activations to BF16; the CPU does not) and within
# 1e-4 with the weights widened (RETRO_CUDA_HALF_GEMM=f32). Issue 13's "SmolLM2-135M
# converted to BF16" check, on the shape (random weights: the device has no model files).
train_compare() {
  local f="$shapes/smollm2-bf16.gguf" data="$shapes/train.txt"
  if [ "$dry" = 1 ]; then
    f="$shapes/tiny-bf16-train.gguf"
    "$bin" make-tiny --arch llama --type bf16 -o "$f" > /dev/null 2>&1 || { say "  train cpu vs cuda: FAIL - make-tiny"; failed_steps="$failed_steps train-compare"; return; }
  fi
  [ -f "$f" ] || { say "  train cpu vs cuda: skipped (no $f)"; skipped_steps="$skipped_steps train-compare"; return; }
  for i in $(seq 1 400); do echo "The river $i runs past the mill and the bridge, where the grey heron waits for fish."; done > "$data"
  local args=(train -m "$f" -d "$data" --set training.method=full --set training.ctx=128 --set training.batch_size=1
              --set training.steps=3 --set training.eval_every=0 --set training.lr=1e-4 --progress lines)
  run "train on the cpu" 150 train-cpu.log "$bin" "${args[@]}" -o "$shapes/train-cpu" || return 0
  verdict "train on the cpu" "$rc" "$(grep -o 'done: [0-9]* steps' "$out/train-cpu.log" | tail -1)"
  local mode tol
  for mode in tensor f32; do
    tol=1.6e-2; [ "$mode" = f32 ] && tol=1e-4
    run "train on cuda ($mode)" 120 "train-cuda-$mode.log" env RETRO_CUDA_HALF_GEMM=$mode "$bin" "${args[@]}"       --device cuda -o "$shapes/train-cuda-$mode" || return 0
    local cmp; cmp=$(paste <(grep -o '"loss":[0-9.e+-]*' "$shapes/train-cpu/train.jsonl" | cut -d: -f2) \
                         <(grep -o '"loss":[0-9.e+-]*' "$shapes/train-cuda-$mode/train.jsonl" | cut -d: -f2) |
      awk -v tol="$tol" '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; if (r > tol) bad++; n++ }
                         END { printf "%d steps, worst relative loss gap %.2e (bound %s)%s", n, w, tol, (n == 3 && !bad) ? "" : " BAD" }')
    verdict "train on cuda ($mode)" "$([ "$rc" = 0 ] && [[ "$cmp" != *BAD* ]] && echo 0 || echo 1)" "$cmp"
  done
}
train_compare

# 5c. The other CUDA test binaries under memcheck and racecheck, while the budget lasts (not
# test_cuda_host*: those test the host execution, which no GPU runs).
for t in "$build"/test_cuda_*; do
  { [ -x "$t" ] && [ -f "$t" ]; } || continue
  case "$(basename "$t")" in test_cuda_host*) continue ;; esac
  for tool in memcheck racecheck; do sanitize "$tool" 60 "$t"; done
done

# 6. The device benchmarks.
dev=(RG_BENCH_DEVICE=cuda RG_BENCH_SHAPES="$shapes")
if [ "$dry" = 1 ]; then
  bench "bench_train shapes" 240 "${dev[@]}" -- "$build/bench_train" 1 shape
  bench "bench_generate tiny bf16" 120 "${dev[@]}" RG_BENCH_MODEL="$shapes/tiny-bf16.gguf" RG_BENCH_PP=8 RG_BENCH_TG=4 \
    RG_BENCH_REPS=1 RG_BENCH_PROFILE=1 -- "$build/bench_generate"
  bench "bench_flash_attn cuda (T=64, host execution)" 120 "${dev[@]}" -- "$build/bench_flash_attn"
else
  bench "bench_flash_attn cuda (T=4096)" 120 "${dev[@]}" -- "$build/bench_flash_attn"
  bench "bench_train tiny-shape" 90 "${dev[@]}" -- "$build/bench_train" 2 tiny-shape
  bench "bench_train smollm2-shape" 180 "${dev[@]}" -- "$build/bench_train" 2 smollm2-shape
  bench "bench_generate smollm2 bf16" 90 "${dev[@]}" RG_BENCH_MODEL="$shapes/smollm2-bf16.gguf" -- "$build/bench_generate"
  bench "bench_generate 1b bf16" 120 "${dev[@]}" RG_BENCH_MODEL="$shapes/1b-bf16.gguf" -- "$build/bench_generate"
  bench "bench_generate smollm2 profile" 60 "${dev[@]}" RG_BENCH_MODEL="$shapes/smollm2-bf16.gguf" RG_BENCH_REPS=1 \
    RG_BENCH_PROFILE=1 -- "$build/bench_generate"
  bench "bench_precision (f16_base_training, 200 steps, CPU and CUDA columns)" 180 "${dev[@]}" -- "$build/bench_precision" 200
  bench "bench_train 1b-shape" 300 "${dev[@]}" -- "$build/bench_train" 1 1b-shape
fi
fi  # 5b-6

# 6b. Issue 24's benchmarks: quantized models on the device (GPU_CHECK_ONLY=issue24 runs them alone).
# On each shape (the tiny one under GPU_CHECK_DRY) the BF16 file made above, quantized as
# `retrograd quantize F OUT Q4_K_M`:
#   a. LoRA training rows on the Q4_K_M file with RETRO_REQUIRE_GPU_RESIDENT=1 (bench_train's
#      "SHAPE-shape q4_k_m" rows): tokens/s, MFU against the measured BF16 GEMM peak (and the
#      nominal one), the step's device memory beside what the plan says must be resident. Until
#      every quantized op has a device kernel the requirement refuses the row, naming the node;
#      the default row then runs again without it, its fallbacks counted (not a GPU-resident figure);
#   c. in the same run, the fused cross-entropy against the materialized logits ("fused-ce" and
#      "unfused-ce" rows): device memory and tokens/s;
#   b. prompt (512) and generation (128) tokens/s per weight type (bench_generate, files made
#      from the BF16 one into gen-SHAPE/), then llama.cpp's llama-bench (CUDA, -ngl 99, -p 512
#      -n 128) on the same files, once its build (step 1a) is done; a table of both and ours /
#      theirs per type.
# Then the precision tables' CUDA column (test_f16_base_training, bench_precision 200 steps).
i24_shapes=(smollm2 1b)
[ "$dry" = 1 ] && i24_shapes=(tiny)
gen_types="f16,bf16,q8_0,q4_0,q4_k_m,iq4_xs"
dev=(RG_BENCH_DEVICE=cuda RG_BENCH_SHAPES="$shapes")
i24_quantize() {  # i24_quantize SHAPE: SHAPE-bf16.gguf (made when missing) -> SHAPE-Q4_K_M.gguf
  local sh="$1" f="$shapes/$1-bf16.gguf" q="$shapes/$1-Q4_K_M.gguf"
  if [ ! -f "$f" ]; then
    run "make-tiny --shape $sh" 180 "make-tiny-$sh.log" "$bin" make-tiny --arch llama --shape "$sh" --type bf16 -o "$f" || return 1
    verdict "make-tiny --shape $sh" "$rc" "$(du -h "$f" 2>/dev/null | cut -f1)"
    [ "$rc" = 0 ] || return 1
  fi
  run "quantize $sh Q4_K_M" 180 "quantize-$sh.log" "$bin" quantize "$f" "$q" Q4_K_M || return 1
  verdict "quantize $sh Q4_K_M" "$rc" "$(du -h "$q" 2>/dev/null | cut -f1)"
  [ "$rc" = 0 ]
}
for sh in "${i24_shapes[@]}"; do
  i24_quantize "$sh" || continue
  steps=2
  [ "$sh" = 1b ] && steps=1
  bench "bench_train $sh-shape q4_k_m resident" 300 RETRO_REQUIRE_GPU_RESIDENT=1 "${dev[@]}" -- \
    "$build/bench_train" "$steps" "$sh-shape q4_k_m"
  if grep -q "refused by the device" "$out/bench-bench_train-$sh-shape-q4_k_m-resident.log" 2>/dev/null; then
    say "    (refused under RETRO_REQUIRE_GPU_RESIDENT=1: an op of the step has no device kernel for its types yet; the"
    say "    default row again without the requirement, its CPU fallbacks counted: not a GPU-resident figure)"
    bench "bench_train $sh-shape q4_k_m with fallbacks" 240 "${dev[@]}" -- "$build/bench_train" 1 "$sh-shape q4_k_m lora r16"
  fi
done
# b. Ours per type, then llama.cpp's on the same files.
for sh in "${i24_shapes[@]}"; do
  [ -f "$shapes/$sh-bf16.gguf" ] || continue
  mkdir -p "$shapes/gen-$sh"
  sizes=(RG_BENCH_PP=512 RG_BENCH_TG=128 RG_BENCH_REPS=3)
  [ "$dry" = 1 ] && sizes=(RG_BENCH_PP=8 RG_BENCH_TG=4 RG_BENCH_REPS=1)
  bench "bench_generate $sh per type" 300 "${dev[@]}" RG_SMOLLM2="$shapes/$sh-bf16.gguf" RG_BENCH_CACHE="$shapes/gen-$sh" \
    RG_BENCH_CACHE_PREFIX="$sh" RG_BENCH_TYPES="$gen_types" "${sizes[@]}" -- "$build/bench_generate"
done
if [ -n "$llama_pid" ]; then
  left=$((deadline - SECONDS - 30))
  echo "[$(stamp)] waiting for llama.cpp's build (at most ${left}s more) ..."
  t0=$SECONDS
  while kill -0 "$llama_pid" 2>/dev/null && [ $((deadline - SECONDS)) -gt 30 ]; do sleep 2; done
  if kill -0 "$llama_pid" 2>/dev/null; then
    kill -TERM "$llama_pid" 2>/dev/null; wait "$llama_pid" 2>/dev/null; llama_pid=""
    llama_why="its build did not finish inside the budget (log llama-build.log)"
  else
    wait "$llama_pid"; lrc=$?; llama_pid=""
    llama_bench=$(find "$llama_build/b" -name llama-bench -type f -perm -u+x 2>/dev/null | head -1)
    [ "$lrc" = 0 ] && [ -n "$llama_bench" ] || llama_why="its build failed (rc=$lrc; log llama-build.log: $(grep -m1 -iE 'error' "$out/llama-build.log" | cut -c1-160))"
  fi
  say "  llama.cpp CUDA build: $([ -n "$llama_bench" ] && echo "ok (waited $((SECONDS - t0))s for it here): $llama_bench" || echo "$llama_why")"
fi
if [ -z "$llama_bench" ]; then
  say "  llama-bench (llama.cpp's CUDA build) beside bench_generate: not run: $llama_why"
  not_run="$not_run llama-bench"
else
  for sh in "${i24_shapes[@]}"; do
    for t in ${gen_types//,/ }; do
      f="$shapes/gen-$sh/$sh-$t.gguf"
      [ -f "$f" ] || continue
      run "llama-bench $sh $t" 120 "llama-bench-$sh-$t.log" env J="$out/llama-bench-$sh-$t.json" bash -c '"$@" > "$J"' _ \
        "$llama_bench" -m "$f" -ngl 99 -p 512 -n 128 -r 3 -o json || break
      [ "$rc" = 0 ] || { say "  llama-bench $sh $t: rc=$rc (not ours: listed apart; log llama-bench-$sh-$t.log)"; not_run="$not_run llama-bench-$sh-$t"; }
    done
    # The table: ours (bench_generate's row: prompt, gen tok/s) beside llama-bench's pp512 / tg128 avg_ts.
    python3 - "$out" "$sh" "$gen_types" <<'PY' 2>&1 | tee -a "$out/summary.txt"
import json, os, re, sys
out, sh, types = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
ours = {}
try:
    for line in open(os.path.join(out, f"bench-bench_generate-{sh}-per-type.log")):
        m = re.match(r"^(\S+)\s+([\d.]+)\s+([\d.]+)\s", line)
        if m and m.group(1) in types:
            ours[m.group(1)] = (float(m.group(2)), float(m.group(3)))
except OSError:
    pass
print(f"    {sh} shape on the device: ours (bench_generate) and llama.cpp's CUDA build (llama-bench), tokens/s")
print(f"    {'type':8} {'ours pp512':>11} {'llama pp512':>12} {'ratio':>6} {'ours tg128':>11} {'llama tg128':>12} {'ratio':>6}")
for t in types:
    lp = lt = None
    try:
        for test in json.load(open(os.path.join(out, f"llama-bench-{sh}-{t}.json"))):
            if test.get("n_prompt") == 512 and test.get("n_gen") == 0: lp = test["avg_ts"]
            if test.get("n_gen") == 128 and test.get("n_prompt") == 0: lt = test["avg_ts"]
    except (OSError, ValueError):
        pass
    o = ours.get(t)
    f = lambda x: f"{x:.1f}" if x else "-"
    r = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    print(f"    {t:8} {f(o and o[0]):>11} {f(lp):>12} {r(o and o[0], lp):>6} {f(o and o[1]):>11} {f(lt):>12} {r(o and o[1], lt):>6}")
PY
  done
fi
# The precision tables' CUDA column (issue 24 item 6); in the full run step 3 and 6 ran them.
if ! full; then
  test_bin "$([ "$dry" = 1 ] && echo 600 || echo 240)" "$build/test_f16_base_training"
  if [ "$dry" = 1 ]; then
    bench "bench_precision (4 steps, host execution)" 420 RG_BENCH_DEVICE=cuda RG_BENCH_HOST_STEPS=2 -- \
      "$build/bench_precision" 4
  else
    bench "bench_precision (200 steps)" 180 RG_BENCH_DEVICE=cuda -- "$build/bench_precision" 200
  fi
fi

if full; then  # 7
# 7. The CPU suite, while the budget lasts.
for t in "$build"/test_*; do
  { [ -x "$t" ] && [ -f "$t" ]; } || continue
  case "$(basename "$t")" in test_cuda | test_cuda_* | test_session | test_session_state | test_session_rewind | test_session_rewind_recurrent | test_session_exact | test_session_seqs | test_engine | test_train_device | test_device_memory | test_f16_base_training) continue ;; esac
  if [ "$dry" = 1 ]; then
    case "$(basename "$t")" in test_tensor | test_schedule) ;; *) continue ;; esac
  fi
  if [ "$(basename "$t")" = test_ops ]; then test_bin 240 CUDA_VISIBLE_DEVICES= "$t"; else test_bin 180 "$t"; fi
done
[ "$dry" = 1 ] && say "  (GPU_CHECK_DRY: of the CPU suite only test_tensor and test_schedule ran; scripts/test.sh runs it all)"
fi  # 7

finish
