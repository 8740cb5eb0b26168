#!/usr/bin/env bash
# test_cli_cuda.sh BUILD_DIR - the commands on the CUDA device, end to end, through the host
# execution of the CUDA code (RETRO_CUDA_HOST=1, also when the variable is unset; on a GPU machine,
# RETRO_CUDA_HOST=0 runs it on the GPU, as scripts/gpu-check.sh does):
#   - every command that uses the device prints one line saying it is the host execution;
#   - train --device cuda, full f32: per-step losses within 1e-5 relative of the CPU run's;
#   - a run killed after a checkpoint and resumed on the device ends with the same per-step
#     losses and the same model bytes as the uninterrupted run on the device (bit for bit on
#     the same device kind);
#   - BF16 weights trained in place on the device: losses within 1e-4 of the CPU's, BF16 kept;
#   - LoRA on a quantized base on the device; on the tiny Q4_K_M with RETRO_REQUIRE_GPU_RESIDENT=1
#     (the quantized GET_ROWS, products and fused loss all on the device), and the adapter it writes
#     loads in generate --lora; generate --device cuda on Q4_K_M, Q8_0 and IQ4_XS files resident,
#     with and without the decode step's CUDA graph, draws host sampling's tokens;
#   - the memory line and report.json give the run's device memory (scratch_*) and the device's;
#   - generate --device cuda answers; report names the host execution;
#   - generate --device cuda with a seed draws on the device the tokens that RETRO_DEVICE_SAMPLING=0
#     (the CPU's sampler on logits read back) draws, for the default chain and for top-p alone;
#     report --device cuda says cap_device_sampling true;
#   - lfm2, mamba2, gemma2 and gemma3 full f32 on the device (SSM_CONV, SSM_SCAN, GELU, SOFTCAP,
#     the windowed SOFT_MAX and their backward): 3 per-step losses within 1e-5 of the CPU run's;
#     generate --device cuda on each; gemma2 trains resident (RETRO_REQUIRE_GPU_RESIDENT=1: no
#     node falls back to the CPU).
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"
export RETRO_CUDA_HOST="${RETRO_CUDA_HOST-1}"

for i in $(seq 1 24); do
  a=$((i * 7 % 50 + 1)); b=$((i * 13 % 40 + 2))
  printf '{"messages": [{"role": "user", "content": "What is %d plus %d?"}, {"role": "assistant", "content": "%d plus %d is %d."}]}\n' \
    "$a" "$b" "$a" "$b" "$((a + b))"
done > "$tmp/chat.jsonl"
"$bin" make-tiny --arch qwen2 --type f32 -o "$tmp/f32.gguf" >/dev/null
"$bin" make-tiny --arch qwen2 --type q4_k_m -o "$tmp/q4.gguf" >/dev/null
"$bin" make-tiny --arch qwen2 --type bf16 -o "$tmp/bf16.gguf" >/dev/null

full=(-m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" --set training.method=full --set training.lr=1e-3 --set training.ctx=64
      --set training.batch_size=2 --set training.eval_every=0 --progress lines)
losses() { grep -o '"loss":[0-9.e+-]*' "$1" | cut -d: -f2; }

if [ "$RETRO_CUDA_HOST" = 1 ]; then
  expect "train --device cuda says it runs on the host execution" 0 "host execution of the CUDA code \(not a GPU\)" -- \
    "$bin" train "${full[@]}" --set training.steps=6 --device cuda -o "$tmp/cuda"
else
  expect "train --device cuda" 0 "done: 6 steps" -- "$bin" train "${full[@]}" --set training.steps=6 --device cuda -o "$tmp/cuda"
fi
"$bin" train "${full[@]}" --set training.steps=6 -o "$tmp/cpu" >/dev/null 2>&1
paste <(losses "$tmp/cpu/train.jsonl") <(losses "$tmp/cuda/train.jsonl") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++; n++ } END { exit !(n == 6 && !bad) }'
check "train --device cuda: 6 per-step losses within 1e-5 of the CPU's" $? "$(losses "$tmp/cuda/train.jsonl" | tr '\n' ' ')"

# Killed after a checkpoint, resumed: the same bits as the uninterrupted device run.
run=("${full[@]}" --set training.steps=8 --set training.save_every=2 --device cuda)
"$bin" train "${run[@]}" -o "$tmp/whole" >/dev/null 2>&1
KILL_AT=step-2 run_killed "$tmp/killed" "$bin" train "${run[@]}" -o "$tmp/killed"
killed_at=$(wc -l < "$tmp/killed/train.jsonl")
[ "$killed_at" -lt 8 ]; check "resume on cuda: the run was killed before its end (at step $killed_at)" $?
expect "resume on cuda: continues from the newest checkpoint" 0 "resume: .*step-[0-9]+ \(step [0-9]+ of 8\)" -- \
  "$bin" train "${run[@]}" --resume "$tmp/killed"
cmp -s "$tmp/whole/model.gguf" "$tmp/killed/model.gguf"; check "resume on cuda: the final model is byte-identical" $?
diff <(losses "$tmp/whole/train.jsonl") <(losses "$tmp/killed/train.jsonl") >/dev/null
check "resume on cuda: the per-step losses are identical" $?

expect "train --device cuda reports the device's memory" 0 "device memory \(this run\): weights .* MiB free" -- \
  "$bin" train "${full[@]}" --set training.steps=1 --device cuda -o "$tmp/mem"
grep -q '"device_memory_mib": {"scratch_weights"' "$tmp/mem/report.json"; check "report.json has device_memory_mib" $?
# BF16 weights trained in place on the device (stochastic rounding keyed as on the CPU).
bf=(-m "$tmp/bf16.gguf" -d "$tmp/chat.jsonl" --set training.method=full --set training.lr=1e-3 --set training.ctx=64
    --set training.batch_size=2 --set training.eval_every=0 --set training.steps=4 --progress lines)
# On the tensor path (RETRO_CUDA_HALF_GEMM=tensor, the default) every product with a BF16 weight
# rounds its F32 operand to BF16 (u = 2^-8), which the CPU does not: losses within 4u = 1.6e-2.
# With the weights widened (f32) only summation orders differ: within 1e-4.
expect "train --device cuda, bf16 in place" 0 "done: 4 steps" -- "$bin" train "${bf[@]}" --device cuda -o "$tmp/bf_cuda"
RETRO_CUDA_HALF_GEMM=f32 "$bin" train "${bf[@]}" --device cuda -o "$tmp/bf_cuda32" >/dev/null 2>&1
# The CPU run multiplies in F32 (--exact): on a CPU with a matrix unit auto would take BF16 products.
"$bin" train "${bf[@]}" --exact -o "$tmp/bf_cpu" >/dev/null 2>&1
within() {  # within REL A.jsonl B.jsonl: 4 per-step losses, each within REL of the first file's
  paste <(losses "$2") <(losses "$3") |
    awk -v rel="$1" '{ d = $1 - $2; if (d < 0) d = -d; if (d > rel * $1) bad++; n++ } END { exit !(n == 4 && !bad) }'
}
within 1.6e-2 "$tmp/bf_cpu/train.jsonl" "$tmp/bf_cuda/train.jsonl"
check "train --device cuda, bf16 (tensor path): 4 per-step losses within 1.6e-2 of the CPU's" $? \
  "$(losses "$tmp/bf_cuda/train.jsonl" | tr '\n' ' ')"
within 1e-4 "$tmp/bf_cpu/train.jsonl" "$tmp/bf_cuda32/train.jsonl"
check "train --device cuda, bf16 (RETRO_CUDA_HALF_GEMM=f32): 4 per-step losses within 1e-4 of the CPU's" $? \
  "$(losses "$tmp/bf_cuda32/train.jsonl" | tr '\n' ' ')"
expect "train --device cuda, bf16: the result keeps bf16" 0 "blk.0.attn_q.weight.*bf16" -- "$bin" info "$tmp/bf_cuda/model.gguf"
expect "lora on q4_k_m on cuda" 0 "done: 4 steps" -- "$bin" train -m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" \
  --set training.lr=3e-3 --set training.ctx=64 --set training.steps=4 --progress lines --device cuda -o "$tmp/lora"
# Resident: nothing falls back, and the adapter loads in generate --lora.
out=$(RETRO_REQUIRE_GPU_RESIDENT=1 "$bin" train -m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" --set training.lr=3e-3 \
  --set training.ctx=64 --set training.steps=2 --progress lines --device cuda -o "$tmp/lora-res" 2>&1); rc=$?
grep -q "done: 2 steps" <<<"$out" && [ -s "$tmp/lora-res/adapter.gguf" ]
check "lora on q4_k_m on cuda, resident (RETRO_REQUIRE_GPU_RESIDENT=1): 2 steps, an adapter" $? "$(tail -2 <<<"$out")"
expect "generate --lora loads the adapter trained resident on cuda" 0 "generation: [1-4] tokens" -- \
  "$bin" generate -m "$tmp/q4.gguf" --lora "$tmp/lora-res/adapter.gguf" -p "What is 1 plus 2?" -n 4
# Generation of quantized files on the device, resident (the quantized GET_ROWS, the in-place
# decoder's single-token products, the sliced prompt products, sampling on the device), with
# the decode step in a CUDA graph too (the IQ tables are uploaded before the capture): the
# seeded tokens are those of host sampling on the same device.
for q in q4_k_m q8_0 iq4_xs; do
  [ -s "$tmp/gen-$q.gguf" ] || "$bin" make-tiny --arch qwen2 --type $q -o "$tmp/gen-$q.gguf" >/dev/null
  for g in 0 1; do
    a=$(RETRO_REQUIRE_GPU_RESIDENT=1 RETRO_CUDA_GRAPHS=$g "$bin" generate -m "$tmp/gen-$q.gguf" -p "What is 3 plus 4?" \
      -n 10 --device cuda --seed 7 --temp 0.9 2>"$tmp/gen-err"); rc=$?
    b=$(RETRO_DEVICE_SAMPLING=0 RETRO_CUDA_GRAPHS=$g "$bin" generate -m "$tmp/gen-$q.gguf" -p "What is 3 plus 4?" \
      -n 10 --device cuda --seed 7 --temp 0.9 2>/dev/null)
    [ "$rc" = 0 ] && grep -aEq "generation: [0-9]+ tokens" "$tmp/gen-err" && [ -n "$a" ] && [ "$a" = "$b" ]
    check "generate --device cuda on $q resident (RETRO_CUDA_GRAPHS=$g): device sampling gives host sampling's tokens" $? \
      "rc $rc: $(tail -2 "$tmp/gen-err" | tr -cd '[:print:]\n')"
  done
done
expect "generate --device cuda" 0 "generation: [1-8] tokens" -- "$bin" generate -m "$tmp/cuda/model.gguf" \
  -p "What is 1 plus 2?" -n 8 --device cuda
# The draw on the device against the CPU's sampler on the same device's logits: the same text.
for opts in "--seed 5 --repeat-penalty 1.2" "--seed 9 --temp 1.3 --top-k 0 --min-p 0 --top-p 0.9"; do
  a=$("$bin" generate -m "$tmp/cuda/model.gguf" -p "What is 3 plus 4?" -n 12 --device cuda $opts 2>/dev/null)
  b=$(RETRO_DEVICE_SAMPLING=0 "$bin" generate -m "$tmp/cuda/model.gguf" -p "What is 3 plus 4?" -n 12 --device cuda $opts 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ]; check "generate --device cuda $opts: device sampling gives the host sampler's text" $? "'$a' vs '$b'"
done
expect "report --device cuda: cap_device_sampling true" 0 "cap_device_sampling  true \(the CUDA kernels \(cuda/sampling.cu\)" -- \
  "$bin" report --device cuda
for i in $(seq 1 30); do echo "Line $i: the quick brown fox jumps over the lazy dog."; done > "$tmp/text.txt"
for a in lfm2 mamba2 gemma2 gemma3; do
  "$bin" make-tiny --arch $a --type f32 -o "$tmp/$a.gguf" >/dev/null
  rec=(-m "$tmp/$a.gguf" -d "$tmp/text.txt" --set training.method=full --set training.lr=1e-3 --set training.ctx=48
       --set training.batch_size=2 --set training.eval_every=0 --set training.steps=3 --progress lines)
  "$bin" train "${rec[@]}" -o "$tmp/$a-cpu" >/dev/null 2>&1
  expect "$a: train --device cuda" 0 "done: 3 steps" -- "$bin" train "${rec[@]}" --device cuda -o "$tmp/$a-cuda"
  paste <(losses "$tmp/$a-cpu/train.jsonl") <(losses "$tmp/$a-cuda/train.jsonl") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++; n++ } END { exit !(n == 3 && !bad) }'
  check "$a: train --device cuda: 3 per-step losses within 1e-5 of the CPU's" $? "$(losses "$tmp/$a-cuda/train.jsonl" | tr '\n' ' ')"
  expect "$a: generate --device cuda" 0 "generation: [1-4] tokens" -- "$bin" generate -m "$tmp/$a.gguf" -p "Line 1:" -n 4 --raw --device cuda
done
expect "gemma2: train --device cuda resident (RETRO_REQUIRE_GPU_RESIDENT=1)" 0 "done: 3 steps" -- \
  env RETRO_REQUIRE_GPU_RESIDENT=1 "$bin" train -m "$tmp/gemma2.gguf" -d "$tmp/text.txt" --set training.method=full \
  --set training.ctx=48 --set training.eval_every=0 --set training.steps=3 --progress lines --device cuda -o "$tmp/g2-res"
if [ "$RETRO_CUDA_HOST" = 1 ]; then
  expect "report names the host execution" 0 "host execution of the CUDA code" -- "$bin" report
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
