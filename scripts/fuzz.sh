#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] - fuzz the GGUF reader (fuzz/fuzz_gguf.c) with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/fuzz.sh          # 60 seconds
#   scripts/fuzz.sh 3600     # a longer run: one hour
#   scripts/fuzz.sh 0        # no fuzzing: build, then run the seeds and regressions once
#
# Configures a separate build directory (build-fuzz, or $RG_FUZZ_BUILD_DIR) with clang
# and -DRG_FUZZ=ON (CUDA off), builds fuzz_gguf and the retrograd CLI, writes the seed
# corpus (fuzz/make_corpus.sh), replays fuzz/regressions/*, then fuzzes for SECONDS with
# fuzz/gguf.dict. The growing corpus stays in build-fuzz/fuzz-corpus between runs.
# Exits non-zero when the fuzzer finds a crash, a hang, a leak, an out-of-memory or a
# sanitizer report, and prints where the input that triggered it was saved. The last
# line is "1 passed, 0 failed" or "0 passed, 1 failed" (for scripts/test.sh).
# Environment: RG_FUZZ_CC (default clang), JOBS (build parallelism, default 2).
set -euo pipefail

secs=${1:-60}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${RG_FUZZ_BUILD_DIR:-$root/build-fuzz}
cc=${RG_FUZZ_CC:-clang}
jobs=${JOBS:-2}

result=fail
trap 'if [ "$result" = pass ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi' EXIT

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DRG_FUZZ=ON -DRG_CUDA=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" --target fuzz_gguf retrograd

seeds=$build/fuzz-seeds
corpus=$build/fuzz-corpus
artifacts=$build/fuzz-artifacts
rm -rf "$seeds"
mkdir -p "$corpus" "$artifacts"
"$root/fuzz/make_corpus.sh" "$build" "$seeds"

# UBSan reports must stop the run (the library is built with recoverable UBSan checks);
# ASan reports always do.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}

# Inputs that once broke the reader must keep passing.
shopt -s nullglob
regressions=("$root"/fuzz/regressions/*)
if [ ${#regressions[@]} -gt 0 ]; then
    echo "fuzz.sh: replaying ${#regressions[@]} regression input(s)"
    "$build/fuzz_gguf" -runs=1 "${regressions[@]}"
fi

stamp=$build/.fuzz-start
touch "$stamp"
sleep 1  # artifacts written from now on are strictly newer than the stamp
if [ "$secs" -eq 0 ]; then
    echo "fuzz.sh: running the seeds once (no fuzzing)"
    limit=(-runs=0)
else
    echo "fuzz.sh: fuzzing for $secs s (corpus $corpus, artifacts $artifacts)"
    limit=(-max_total_time="$secs")
fi
# libFuzzer's progress lines go to a log; its last lines (stats, or the report) are shown.
log=$build/fuzz.log
set +e
"$build/fuzz_gguf" "$corpus" "$seeds" "${limit[@]}" \
    -dict="$root/fuzz/gguf.dict" -max_len=65536 -timeout=5 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
rc=$?
set -e
grep -E "cov:" "$log" | tail -1 || true
grep -E "^stat::" "$log" | head -12 || true
if [ "$rc" -ne 0 ]; then tail -60 "$log"; fi

# What this run added to the artifacts (crash-*, timeout-*, oom-*, leak-*, slow-unit-*).
found=()
while IFS= read -r f; do found+=("$f"); done < <(find "$artifacts" -type f -newer "$stamp" | sort)
if [ "$rc" -ne 0 ] || [ ${#found[@]} -gt 0 ]; then
    echo "fuzz.sh: FAILED (libFuzzer exit status $rc)" >&2
    for f in "${found[@]}"; do echo "fuzz.sh: input saved at $f" >&2; done
    echo "fuzz.sh: reproduce with: $build/fuzz_gguf FILE" >&2
    exit 1
fi
echo "fuzz.sh: no crash in $secs s; corpus now $(ls "$corpus" | wc -l) inputs"
result=pass
