#!/usr/bin/env bash
# build.sh [DIR] [cmake args...] - configure and build (Release by default).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"; shift || true
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"$jobs" 2>&1 | grep -Ev '^\[ *[0-9]+%\]|^-- ' || true
test "${PIPESTATUS[0]}" = 0
