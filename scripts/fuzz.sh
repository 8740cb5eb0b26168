#!/usr/bin/env bash
# scripts/fuzz.sh [TARGET|all] [SECONDS] - fuzz the parsers of untrusted input with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   scripts/fuzz.sh                  # every target, 60 seconds each
#   scripts/fuzz.sh all 30           # every target, 30 seconds each (what scripts/test.sh runs)
#   scripts/fuzz.sh tokenizer 3600   # one target for an hour
#   scripts/fuzz.sh chat 0           # no fuzzing: build, then run the seeds and regressions once
#   scripts/fuzz.sh 600              # the GGUF reader for 10 minutes (the form before targets)
#   RG_FUZZ_RUNS=10000000 nice -n 10 scripts/fuzz.sh jsonl 1800   # 10 million inputs, 30 min at most
#
# Targets (fuzz/fuzz_TARGET.c; each file's header says what it checks and how it reads its input):
#   gguf       the GGUF reader (src/gguf/gguf_read.c)
#   jsonl      the training data reader: JSONL text / messages / prompt+completion, plain text
#   config     the training config: YAML files and --set key=value strings
#   tokenizer  encode arbitrary bytes, decode arbitrary ids (streaming and whole), five vocabularies
#   chat       the chat-template recognizer, and the renderer of every known template
#   tool_calls tool calls parsed out of generated text (Hermes, LFM2), checked, rendered back
#   serve_request  `retrograd serve`'s OpenAI request bodies, its error replies, the Host header check
#   agent_tools    `retrograd agent --tools FILE`'s tools file (YAML or JSON), nothing started or run
#
# Configures a separate build directory (build-fuzz, or $RG_FUZZ_BUILD_DIR) with clang and
# -DRG_FUZZ=ON (CUDA off) and builds the targets (and the retrograd CLI, for the GGUF seeds).
# Per target: writes the seed corpus (fuzz/make_corpus.sh TARGET), replays every input of
# fuzz/regressions/TARGET/ (inputs that once broke something must keep passing), then fuzzes
# for SECONDS with fuzz/TARGET.dict. The growing corpus stays in build-fuzz/fuzz-corpus/TARGET
# between runs; what libFuzzer finds goes to build-fuzz/fuzz-artifacts/TARGET. A target fails
# on a crash, a broken promise (the target's checks abort with a message), a hang, a leak, an
# out-of-memory or a sanitizer report; the script then prints where the input was saved. Each
# target prints its executions, exec/s and coverage; the last line counts the targets: "8
# passed, 0 failed" (for scripts/test.sh).
# Environment: RG_FUZZ_CC (default clang), JOBS (build parallelism, default 2), RG_FUZZ_RUNS
# (stop each target after this many inputs, or after SECONDS, whichever comes first).
set -euo pipefail

all_targets=(gguf jsonl config tokenizer chat tool_calls serve_request agent_tools)
usage() { echo "usage: $0 [TARGET|all] [SECONDS]   (targets: ${all_targets[*]})" >&2; exit 2; }
is_number() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }

if [ $# -ge 1 ] && is_number "$1"; then
    [ $# -eq 1 ] || usage
    targets=(gguf)
    secs=$1
else
    what=${1:-all}
    secs=${2:-60}
    [ $# -le 2 ] && is_number "$secs" || usage
    if [ "$what" = all ]; then
        targets=("${all_targets[@]}")
    else
        case " ${all_targets[*]} " in *" $what "*) targets=("$what") ;; *) usage ;; esac
    fi
fi
runs=${RG_FUZZ_RUNS:-}
if [ -n "$runs" ] && ! is_number "$runs"; then echo "$0: RG_FUZZ_RUNS must be a number" >&2; exit 2; fi

root=$(cd "$(dirname "$0")/.." && pwd)
build=${RG_FUZZ_BUILD_DIR:-$root/build-fuzz}
cc=${RG_FUZZ_CC:-clang}
jobs=${JOBS:-2}

passed=0 failed=0
trap 'echo "$passed passed, $failed failed"' EXIT

build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
# No CUDA and no host execution of it: no fuzz target reaches the backend.
if ! cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DRG_FUZZ=ON -DRG_CUDA=OFF -DRG_CUDA_HOST=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null ||
   ! cmake --build "$build" -j"$jobs" --target "${build_targets[@]}" retrograd; then
    echo "fuzz.sh: the build failed" >&2
    failed=${#targets[@]}
    exit 1
fi

# UBSan reports must stop the run (the library is built with recoverable UBSan checks);
# ASan reports always do.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}

# The longest input each target is given: whole GGUF headers; texts long enough for the
# encoders' heaps and for many lines, short enough to keep thousands of inputs a second.
max_len_of() {
    case $1 in
    gguf) echo 65536 ;;
    jsonl | tokenizer) echo 2048 ;;
    *) echo 4096 ;;
    esac
}

# fuzz_one TARGET: 0 when the target passes.
fuzz_one() {
    local t=$1 exe=$build/fuzz_$1
    local seeds=$build/fuzz-seeds/$t corpus=$build/fuzz-corpus/$t artifacts=$build/fuzz-artifacts/$t
    local log=$build/fuzz-$t.log stamp=$build/.fuzz-start-$t
    rm -rf "$seeds"
    mkdir -p "$corpus" "$artifacts"
    echo "== fuzz $t"
    "$root/fuzz/make_corpus.sh" "$t" "$build" "$seeds" || return 1

    shopt -s nullglob
    local regressions=("$root"/fuzz/regressions/"$t"/*)
    shopt -u nullglob
    if [ ${#regressions[@]} -gt 0 ]; then
        echo "fuzz.sh: $t: replaying ${#regressions[@]} regression input(s)"
        if ! "$exe" -runs=1 -rss_limit_mb=2048 "${regressions[@]}" >"$log" 2>&1; then
            tail -40 "$log"
            echo "fuzz.sh: $t: FAILED on a regression input (log $log)" >&2
            return 1
        fi
    fi

    touch "$stamp"
    sleep 1  # artifacts written from now on are strictly newer than the stamp
    local limit
    if [ "$secs" -eq 0 ]; then
        echo "fuzz.sh: $t: running the seeds once (no fuzzing)"
        limit=(-runs=0)
    else
        echo "fuzz.sh: $t: fuzzing for $secs s${runs:+ or $runs inputs} (corpus $corpus, artifacts $artifacts)"
        limit=(-max_total_time="$secs" ${runs:+-runs="$runs"})
    fi
    # libFuzzer's progress lines go to the log; its last lines (stats, or the report) are shown.
    local rc=0
    "$exe" "$corpus" "$seeds" "${limit[@]}" -dict="$root/fuzz/$t.dict" -max_len="$(max_len_of "$t")" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
    local execs speed cov
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
    echo "fuzz.sh: $t: ${execs:-?} inputs, ${speed:-?} exec/s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) inputs"

    # What this run added to the artifacts (crash-*, timeout-*, oom-*, leak-*, slow-unit-*).
    local found=() f
    while IFS= read -r f; do found+=("$f"); done < <(find "$artifacts" -type f -newer "$stamp" | sort)
    if [ "$rc" -ne 0 ] || [ ${#found[@]} -gt 0 ]; then
        tail -60 "$log"
        echo "fuzz.sh: $t: FAILED (libFuzzer exit status $rc; log $log)" >&2
        for f in "${found[@]}"; do echo "fuzz.sh: $t: input saved at $f" >&2; done
        echo "fuzz.sh: $t: reproduce with: $exe FILE" >&2
        return 1
    fi
    echo "fuzz.sh: $t: no failure"
}

for t in "${targets[@]}"; do
    if fuzz_one "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
[ "$failed" -eq 0 ]
