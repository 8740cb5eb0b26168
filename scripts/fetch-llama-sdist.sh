#!/usr/bin/env bash
# fetch-llama-sdist.sh [DIR] - llama.cpp's sources for scripts/gpu-check.sh's llama-bench step, from
# llama-cpp-python's source distribution on PyPI (it vendors llama.cpp as vendor/llama.cpp),
# downloaded with pip into a temporary folder. DIR (default .gpu-carry, git-ignored, never
# committed) receives llama.cpp-from-llama_cpp_python-X.Y.Z.tar.gz: vendor/llama.cpp without
# what llama-bench's build does not read (models, docs, media, benches, tests, gguf-py,
# conversion, examples, the server's web UI): about 10 MB against the sdist's 74, so that run's
# carry (64 MiB in all) can take the folder to a lent GPU, which reaches no registry.
# LLAMA_CPP_PYTHON_VERSION=X.Y.Z pins a version. Prints the file's path.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.gpu-carry}"
mkdir -p "$dir"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch-llama-sdist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
spec="llama-cpp-python${LLAMA_CPP_PYTHON_VERSION:+==$LLAMA_CPP_PYTHON_VERSION}"
python3 -m pip download "$spec" --no-deps --no-binary :all: --dest "$tmp" >&2
sdist=$(ls "$tmp"/llama_cpp_python-*.tar.gz 2>/dev/null | head -1)
[ -n "$sdist" ] || { echo "fetch-llama-sdist: pip left no llama_cpp_python-*.tar.gz" >&2; exit 1; }
ver=$(basename "$sdist" .tar.gz); ver=${ver#llama_cpp_python-}
tar xzf "$sdist" -C "$tmp"
src="$tmp/llama_cpp_python-$ver/vendor"
[ -f "$src/llama.cpp/CMakeLists.txt" ] || { echo "fetch-llama-sdist: no vendor/llama.cpp in $sdist" >&2; exit 1; }
out="$dir/llama.cpp-from-llama_cpp_python-$ver.tar.gz"
for d in models docs media benches tests gguf-py conversion examples tools/ui tools/server/public; do rm -rf "$src/llama.cpp/$d"; done
tar czf "$out" -C "$src" llama.cpp
echo "$out ($(du -h "$out" | cut -f1))" >&2
echo "$out"
