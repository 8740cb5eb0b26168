#!/usr/bin/env bash
# build.sh [DIR] [cmake args...] - configure and build (Release by default; RG_BUILD_TARGETS picks targets).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"; shift || true
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
# RG_BUILD_TARGETS="a b": only those targets (a build that serves a few suites).
targets=()
for t in ${RG_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$jobs" "${targets[@]}" 2>&1 | grep -Ev '^\[ *[0-9]+%\]|^-- ' || true
test "${PIPESTATUS[0]}" = 0
