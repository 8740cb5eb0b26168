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
#   1b. the register table: scripts/cuda-kernel-table.sh print (each kernel's registers, shared
#      memory, spills and occupancy from the real nvcc compile) into kernel-table.txt and the
#      summary; said so when that script is not in the checkout
#   2. retrograd report --json --device cuda (a run without a usable device stops here: FAIL)
#   3. the CUDA test binaries on the GPU (RETRO_CUDA_HOST unset): test_cuda* (printed
#      verbatim), test_session, test_train_device, test_device_memory, test_f16_base_training; then test_ops' CUDA parity table: an (op,
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
#   7. every other test binary (the CPU suite; test_ops with the GPU hidden, its parity rows
#      being step 3's), RG_TEST_QUICK=1, while the budget lasts
# Writes under $OUT (default ./out/gpu-check): env.txt, configure.log, build.log, report.json,
# one log per step, summary.txt. Progress lines go to stdout; the last line is the summary:
# "gpu-check: PASS ..." or "gpu-check: FAIL ...".
#
# GPU_CHECK_DRY=1 runs the whole script on a machine without a GPU, through the host execution
# of the CUDA code (RETRO_CUDA_HOST=1), at the smallest sizes, to check the script itself: the
# tiny-shape rows only (bench_train skips the larger shapes there), bench_generate on the tiny
# BF16 file, the 1b shape as a --dry-run listing, and two CPU test binaries; the sanitizer steps
# say "no GPU: skipped", and test_ops perf times the host execution (its cuda-host lines). Its
# figures are CPU timings, never GPU results, and its summary says so.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-out/gpu-check}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
dry="${GPU_CHECK_DRY:-0}"
budget="${GPU_CHECK_BUDGET:-480}"
build="${GPU_CHECK_BUILD:-build-gpu}"
deadline=$((SECONDS + budget))
export RETRO_CUDA_ARCHITECTURES="${RETRO_CUDA_ARCHITECTURES:-native}"
if [ "$dry" = 1 ]; then export RETRO_CUDA_HOST=1; else unset RETRO_CUDA_HOST; fi
shapes=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-shapes.XXXXXX")
trap 'rm -rf "$shapes"' EXIT
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
  grep -E 'tok/s +\(best|refused by|rows: skipped|failed:|^\(made |^  step graph:|^device:|^file | (caus|full) \||HOST EXECUTION|TF/s  ' "$out/$log" |
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
run "build" 420 build.log "$cmake_bin" --build "$build" -j"$(nproc)" && verdict "build" "$rc" "architectures $RETRO_CUDA_ARCHITECTURES"
[ -z "$failed_steps$skipped_steps" ] || { tail -40 "$out/build.log"; finish; }
bin="$build/retrograd"

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

# 2. The device.
run "report" 60 report.json "$bin" report --json --device cuda &&
  verdict "report" "$(grep -q '"device": "cuda"' "$out/report.json"; echo $?)" \
    "$(grep -oE '"(gpu_device|gpu_unavailable_reason)": [^,]*' "$out/report.json" | head -2 | tr '\n' ' ')"
case " $failed_steps " in *" report "*) finish ;; esac

# 3. The CUDA test binaries, then the parity table.
for t in "$build"/test_cuda "$build"/test_cuda_* "$build"/test_session "$build"/test_train_device "$build"/test_device_memory "$build"/test_f16_base_training; do
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
  bench "bench_precision (f16_base_training, 200 steps)" 120 "${dev[@]}" -- "$build/bench_precision" 200
  bench "bench_train 1b-shape" 300 "${dev[@]}" -- "$build/bench_train" 1 1b-shape
fi

# 7. The CPU suite, while the budget lasts.
for t in "$build"/test_*; do
  { [ -x "$t" ] && [ -f "$t" ]; } || continue
  case "$(basename "$t")" in test_cuda | test_cuda_* | test_session | test_train_device | test_device_memory | test_f16_base_training) continue ;; esac
  if [ "$dry" = 1 ]; then
    case "$(basename "$t")" in test_tensor | test_schedule) ;; *) continue ;; esac
  fi
  if [ "$(basename "$t")" = test_ops ]; then test_bin 240 CUDA_VISIBLE_DEVICES= "$t"; else test_bin 180 "$t"; fi
done
[ "$dry" = 1 ] && say "  (GPU_CHECK_DRY: of the CPU suite only test_tensor and test_schedule ran; scripts/test.sh runs it all)"
finish
