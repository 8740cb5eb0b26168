#!/usr/bin/env bash
# setup.sh - installs what the build and the tests need on a fresh Debian
# machine of this project's kind. Idempotent: does nothing when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: compiler, CMake, clang + its runtimes (libFuzzer, sanitizers), OpenBLAS,
# libyaml (training configs), libmicrohttpd (`retrograd serve`), curl (its tests), Python.
pkgs=(build-essential cmake clang libclang-rt-14-dev libopenblas-dev libyaml-dev libmicrohttpd-dev curl python3 python3-pip)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python packages for the reference checks only (never used by the product).
if ! python3 - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {l.split('==')[0].split('>=')[0].strip(): l.strip() for l in open('tests/python/requirements.txt') if l.strip() and not l.startswith('#')}
for name in want:
    m.version(name)
PY
then
  echo "setup: installing Python packages from tests/python/requirements.txt"
  python3 -m pip install -q -r tests/python/requirements.txt 2>&1 | grep -v "Running pip as the 'root' user" || true
fi
