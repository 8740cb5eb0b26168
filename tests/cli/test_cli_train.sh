#!/usr/bin/env bash
# test_cli_train.sh BUILD_DIR - `retrograd train` on the tiny model, end to end:
#   - full fine-tuning (f32, f16 in place with SR, bf16 with master weights) and LoRA on a
#     quantized base: the loss falls, OUTDIR has its files, the result loads and generates;
#   - the fused cross-entropy (training.fused_ce=on), alone and with layer recompute: the
#     memory line says so and the loss falls;
#   - lfm2 and mamba2: full fine-tunes whose loss falls and whose result generates, LoRA on
#     every projection of lfm2 (attention, FFN, the short conv's in_proj and out_proj) and of
#     mamba2 (ssm_in, ssm_out), adapters named as llama.cpp's loader expects; both killed and
#     resumed bit for bit;
#   - a run killed for real (SIGKILL) after a checkpoint and resumed with --resume ends with
#     the same train.jsonl losses and the same bytes as the uninterrupted run;
#   - a separate eval file (--eval-data): its samples are the eval split, its losses in train.jsonl;
#   - bad input: unknown key (with a suggestion), wrong value type, invalid JSON line (file and
#     line), unwritable OUTDIR, a quantized model with method=full, a config change on resume,
#     a run that does not fit the memory limit, a full disk during a checkpoint (the previous
#     checkpoint survives): one clear line, a non-zero exit, no crash.
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"


# The data: 48 arithmetic chats (ChatML, loss on the answers) and a text file.
for i in $(seq 1 48); do
  a=$((i * 7 % 50 + 1)); b=$((i * 13 % 40 + 2))
  printf '{"messages": [{"role": "user", "content": "What is %d plus %d?"}, {"role": "assistant", "content": "%d plus %d is %d."}]}\n' \
    "$a" "$b" "$a" "$b" "$((a + b))"
done > "$tmp/chat.jsonl"
for i in $(seq 1 60); do echo "Line $i: the quick brown fox jumps over the lazy dog."; done > "$tmp/text.txt"

"$bin" make-tiny --arch qwen2 --type f32 -o "$tmp/f32.gguf" >/dev/null
"$bin" make-tiny --arch qwen2 --type f16 -o "$tmp/f16.gguf" >/dev/null
"$bin" make-tiny --arch qwen2 --type bf16 -o "$tmp/bf16.gguf" >/dev/null
"$bin" make-tiny --arch qwen2 --type q4_k_m -o "$tmp/q4.gguf" >/dev/null

common=(--set training.ctx=96 --set training.batch_size=2 --set training.eval_every=10 --progress lines)
full=(--set training.method=full --set training.lr=1e-3 "${common[@]}")

# first and last "loss" of a train.jsonl
first_loss() { grep -o '"loss":[0-9.e+-]*' "$1" | head -1 | cut -d: -f2; }
last_loss() { grep -o '"loss":[0-9.e+-]*' "$1" | tail -1 | cut -d: -f2; }
falls() { awk -v a="$(first_loss "$1")" -v b="$(last_loss "$1")" 'BEGIN { exit !(b < 0.7 * a) }'; }

# --- full fine-tuning ---------------------------------------------------------------------
expect "train --help lists every key with defaults" 0 "training.master_weights.*false" -- "$bin" train --help
expect "full f32: 30 steps" 0 "done: 30 steps \(0 skipped\)" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f32" "${full[@]}" --set training.steps=30
falls "$tmp/f32/train.jsonl"; check "full f32: the loss falls by 30%" $? "$(first_loss "$tmp/f32/train.jsonl") -> $(last_loss "$tmp/f32/train.jsonl")"
for f in model.gguf train.jsonl loss.svg report.json checkpoints/step-30/state.gguf; do
  [ -s "$tmp/f32/$f" ]; check "full f32: OUTDIR has $f" $?
done
[ "$(wc -l < "$tmp/f32/train.jsonl")" = 30 ]; check "full f32: one train.jsonl record per step" $?
expect "full f32: the result keeps f32" 0 "output.weight.*f32" -- "$bin" info "$tmp/f32/model.gguf"
expect "full f32: the result generates" 0 "generation: 4 tokens" -- "$bin" generate -m "$tmp/f32/model.gguf" -p "What is 1 plus 2?" -n 4
expect "full f16 in place (SR)" 0 "done: 20 steps" -- "$bin" train -m "$tmp/f16.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f16" "${full[@]}" --set training.steps=20
falls "$tmp/f16/train.jsonl"; check "full f16: the loss falls by 30%" $?
expect "full f16: the result keeps f16" 0 "blk.0.attn_q.weight.*f16" -- "$bin" info "$tmp/f16/model.gguf"
expect "full bf16, master weights, sgd" 0 "done: 20 steps" -- "$bin" train -m "$tmp/bf16.gguf" -d "$tmp/chat.jsonl" -o "$tmp/bf16" "${full[@]}" --set training.steps=20 --set training.master_weights=true --set training.optimizer=sgd --set training.lr=0.5
res=$(sed -n 's/^training.compute_dtype: //p' $(ls -d "$tmp/bf16/checkpoints/"*/ | tail -1)config.yaml)
[ "$res" = f32 ] || [ "$res" = bf16 ]
check "a checkpoint stores training.compute_dtype resolved (auto -> $res here), never auto" $?
expect "full bf16: the result keeps bf16" 0 "blk.0.attn_q.weight.*bf16" -- "$bin" info "$tmp/bf16/model.gguf"
# Activation recompute: layer inputs in f32 give the same bytes as keeping every activation;
# in f16 the memory report says so and the run trains.
expect "full f32, layer recompute" 0 "activations .* MiB \(layer recompute, inputs kept in f32\)" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f32rc" "${full[@]}" --set training.steps=30 --set training.recompute=layer
cmp -s "$tmp/f32/model.gguf" "$tmp/f32rc/model.gguf"; check "full f32, layer recompute: the same model bytes as without" $?
cmp -s <(grep -o '"loss":[0-9.e+-]*' "$tmp/f32/train.jsonl") <(grep -o '"loss":[0-9.e+-]*' "$tmp/f32rc/train.jsonl"); check "full f32, layer recompute: the same per-step losses" $?
expect "full f32, f16 layer inputs" 0 "inputs kept in f16" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f32ck" "${full[@]}" --set training.steps=20 --set training.checkpoint_dtype=f16
falls "$tmp/f32ck/train.jsonl"; check "full f32, f16 layer inputs: the loss falls by 30%" $?
expect "f16 layer inputs need recompute" 1 "training.recompute is none" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f32ckn" "${full[@]}" --set training.checkpoint_dtype=f16 --set training.recompute=none
expect "plain text data" 0 "done: 5 steps" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/text.txt" -o "$tmp/text" "${full[@]}" --set training.steps=5
# A separate evaluation file (--eval-data; a fine-tuning job's validation_file): its loss every eval_every steps,
# all of the training file trained; a missing one is refused naming it.
head -40 "$tmp/chat.jsonl" > "$tmp/chat-train.jsonl"; tail -8 "$tmp/chat.jsonl" > "$tmp/chat-valid.jsonl"
expect "--eval-data: the eval split is the file's" 0 "eval data: .*chat-valid.jsonl: the 8 eval samples" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat-train.jsonl" --eval-data "$tmp/chat-valid.jsonl" -o "$tmp/evalfile" "${full[@]}" --set training.steps=10
[ "$(grep -c '"eval_loss":' "$tmp/evalfile/train.jsonl")" -ge 1 ] && grep -q '"eval_data": ".*chat-valid.jsonl"' "$tmp/evalfile/report.json" &&
  grep -q '"eval_samples": 8' "$tmp/evalfile/report.json"
check "--eval-data: train.jsonl holds eval losses, report.json names the file and counts its 8 samples" $?
expect "--eval-data: a missing file is named" 1 "nope.jsonl" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat-train.jsonl" --eval-data "$tmp/nope.jsonl" -o "$tmp/evalnope" "${full[@]}" --set training.steps=2

# --- LoRA on a quantized base ----------------------------------------------------------------
lora=(--set training.lr=3e-3 "${common[@]}")
expect "lora on q4_k_m" 0 "done: 30 steps" -- "$bin" train -m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" -o "$tmp/lora" "${lora[@]}" --set training.steps=30
falls "$tmp/lora/train.jsonl"; check "lora: the loss falls by 30%" $? "$(first_loss "$tmp/lora/train.jsonl") -> $(last_loss "$tmp/lora/train.jsonl")"
# The fused cross-entropy (training.fused_ce=on): the memory line says so and the run trains.
expect "lora on q4_k_m, fused cross-entropy" 0 "activations .* MiB \(fused cross-entropy\)" -- "$bin" train -m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" -o "$tmp/lorafce" "${lora[@]}" --set training.steps=30 --set training.fused_ce=on
falls "$tmp/lorafce/train.jsonl"; check "lora, fused cross-entropy: the loss falls by 30%" $? "$(first_loss "$tmp/lorafce/train.jsonl") -> $(last_loss "$tmp/lorafce/train.jsonl")"
expect "full f32, layer recompute + fused cross-entropy" 0 "inputs kept in f32; fused cross-entropy" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f32fce" "${full[@]}" --set training.steps=10 --set training.recompute=layer --set training.fused_ce=on
# BF16 products (training.compute_dtype=bf16; on the emulated tiles where the CPU has no BF16 path): the frozen
# Q4_K base is packed into BF16 tiles once and held (cpu/tiles_cache.h), said by the plan and the report.
expect "lora on q4_k_m, bf16 products: the plan holds the base as bf16 tiles" 0 "frozen weights as bf16 tiles: [0-9.]+ MiB wanted, held within [0-9.]+ MiB" -- env RG_TILES_EMULATE=1 "$bin" train -m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" -o "$tmp/lorabf" "${lora[@]}" --set training.steps=3 --set training.compute_dtype=bf16
grep -Eq '"bf16_tiles": \{"wanted_mib": [0-9.]+, "cap_mib": [0-9.]+, "held_mib": [0-9.]+, "entries": [1-9][0-9]*, "packs": [1-9][0-9]*, "hits": [1-9][0-9]*, "refused": 0\}' "$tmp/lorabf/report.json"
check "lora, bf16 products: result.json counts the held tiles, each packed once, read by later steps" $?
expect "lora: adapter.gguf is an adapter" 0 "adapter.type.*lora" -- "$bin" info "$tmp/lora/adapter.gguf"
expect "lora: generate --lora" 0 "generation: [1-4] tokens" -- "$bin" generate -m "$tmp/q4.gguf" --lora "$tmp/lora/adapter.gguf" -p "What is 1 plus 2?" -n 4
expect "lora: merge" 0 "" -- "$bin" merge -m "$tmp/q4.gguf" --lora "$tmp/lora/adapter.gguf" -o "$tmp/merged.gguf"

# --- the recurrent architectures: lfm2 (short conv + attention), mamba2 (SSM) --------------------
# Full fine-tunes and LoRA runs (the default targets: lfm2's attention, FFN and short-conv projections,
# mamba2's ssm_in and ssm_out); packed rows restart the conv and the scan at each document
# (test_train_hybrid checks the numbers). mamba2 (no chat template) trains on the text.
for a in lfm2 mamba2; do
  data="$tmp/chat.jsonl"; [ $a = mamba2 ] && data="$tmp/text.txt"
  "$bin" make-tiny --arch $a --type f32 -o "$tmp/$a.gguf" >/dev/null
  expect "$a: full f32, 30 steps" 0 "done: 30 steps \(0 skipped\)" -- "$bin" train -m "$tmp/$a.gguf" -d "$data" -o "$tmp/$a-full" "${full[@]}" --set training.steps=30
  falls "$tmp/$a-full/train.jsonl"; check "$a full: the loss falls by 30%" $? "$(first_loss "$tmp/$a-full/train.jsonl") -> $(last_loss "$tmp/$a-full/train.jsonl")"
  expect "$a full: the result generates" 0 "generation: [1-4] tokens" -- "$bin" generate -m "$tmp/$a-full/model.gguf" -p "What is 1 plus 2?" -n 4 --raw
done
"$bin" make-tiny --arch lfm2 --type q8_0 -o "$tmp/lfm2-q8.gguf" >/dev/null
expect "lfm2: lora on q8_0" 0 "done: 30 steps" -- "$bin" train -m "$tmp/lfm2-q8.gguf" -d "$tmp/chat.jsonl" -o "$tmp/lfm2-lora" "${lora[@]}" --set training.steps=30
falls "$tmp/lfm2-lora/train.jsonl"; check "lfm2 lora: the loss falls by 30%" $? "$(first_loss "$tmp/lfm2-lora/train.jsonl") -> $(last_loss "$tmp/lfm2-lora/train.jsonl")"
expect "lfm2 lora: generate --lora" 0 "generation: [1-4] tokens" -- "$bin" generate -m "$tmp/lfm2-q8.gguf" --lora "$tmp/lfm2-lora/adapter.gguf" -p "What is 1 plus 2?" -n 4
"$bin" info "$tmp/lfm2-lora/adapter.gguf" > "$tmp/lfm2-lora.info" 2>&1
grep -q "blk.0.shortconv.in_proj.weight.lora_a" "$tmp/lfm2-lora.info" && grep -q "blk.0.shortconv.out_proj.weight.lora_b" "$tmp/lfm2-lora.info" &&
  grep -q "blk.1.attn_q.weight.lora_a" "$tmp/lfm2-lora.info"
check "lfm2 lora: the adapter holds the short conv's in_proj/out_proj pairs, named as llama.cpp's loader expects" $?
expect "mamba2: lora on ssm_in and ssm_out" 0 "done: 30 steps" -- "$bin" train -m "$tmp/mamba2.gguf" -d "$tmp/text.txt" -o "$tmp/mamba2-lora" "${lora[@]}" --set training.steps=30
falls "$tmp/mamba2-lora/train.jsonl"; check "mamba2 lora: the loss falls by 30%" $? "$(first_loss "$tmp/mamba2-lora/train.jsonl") -> $(last_loss "$tmp/mamba2-lora/train.jsonl")"
"$bin" info "$tmp/mamba2-lora/adapter.gguf" > "$tmp/mamba2-lora.info" 2>&1
grep -q "blk.0.ssm_in.weight.lora_a" "$tmp/mamba2-lora.info" && grep -q "blk.1.ssm_out.weight.lora_b" "$tmp/mamba2-lora.info"
check "mamba2 lora: the adapter holds ssm_in and ssm_out pairs" $?
expect "mamba2 lora: generate --lora" 0 "generation: [1-4] tokens" -- "$bin" generate -m "$tmp/mamba2.gguf" --lora "$tmp/mamba2-lora/adapter.gguf" -p "The river" -n 4
expect "mamba2: lora.targets=attn has nothing to adapt" 1 "this mamba2 model has none of the targeted projections" -- "$bin" train -m "$tmp/mamba2.gguf" -d "$tmp/text.txt" -o "$tmp/mamba2-lora-attn" "${lora[@]}" --set lora.targets=attn --set training.steps=2

# --- killed for real, then resumed ---------------------------------------------------------------
run=(-m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" "${full[@]}" --set training.steps=40 --set training.save_every=5)
"$bin" train "${run[@]}" -o "$tmp/whole" >/dev/null 2>&1
KILL_AT=step-10 run_killed "$tmp/killed" "$bin" train "${run[@]}" -o "$tmp/killed"
killed_at=$(wc -l < "$tmp/killed/train.jsonl")
[ "$killed_at" -lt 40 ]; check "resume: the run was killed before its end (at step $killed_at)" $?
expect "resume: continues from the newest checkpoint" 0 "resume: .*step-[0-9]+ \(step [0-9]+ of 40\)" -- "$bin" train "${run[@]}" --resume "$tmp/killed"
cmp -s "$tmp/whole/model.gguf" "$tmp/killed/model.gguf"; check "resume: the final model is byte-identical" $?
diff <(grep -o '"loss":[^,]*' "$tmp/whole/train.jsonl") <(grep -o '"loss":[^,]*' "$tmp/killed/train.jsonl") >/dev/null
check "resume: the per-step losses are identical" $?
# LoRA resume, killed the same way
lrun=(-m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" "${lora[@]}" --set training.steps=24 --set training.save_every=4)
"$bin" train "${lrun[@]}" -o "$tmp/lwhole" >/dev/null 2>&1
run_killed "$tmp/lkilled" "$bin" train "${lrun[@]}" -o "$tmp/lkilled"
"$bin" train "${lrun[@]}" --resume "$tmp/lkilled" >/dev/null 2>&1
cmp -s "$tmp/lwhole/adapter.gguf" "$tmp/lkilled/adapter.gguf"; check "resume lora: the adapter is byte-identical" $?
# The recurrent architectures, killed and resumed the same way: lfm2 full (its conv and attention
# weights, AdamW moments and the data position), mamba2 LoRA on ssm_in/ssm_out.
for a in lfm2 mamba2; do
  data="$tmp/chat.jsonl"; [ $a = mamba2 ] && data="$tmp/text.txt"
  how=("${full[@]}"); out=model.gguf
  [ $a = mamba2 ] && how=("${lora[@]}") && out=adapter.gguf
  hrun=(-m "$tmp/$a.gguf" -d "$data" "${how[@]}" --set training.steps=24 --set training.save_every=4)
  "$bin" train "${hrun[@]}" -o "$tmp/$a-whole" >/dev/null 2>&1
  run_killed "$tmp/$a-killed" "$bin" train "${hrun[@]}" -o "$tmp/$a-killed"
  at=$(wc -l < "$tmp/$a-killed/train.jsonl")
  [ "$at" -lt 24 ]; check "$a resume: the run was killed before its end (at step $at)" $?
  "$bin" train "${hrun[@]}" --resume "$tmp/$a-killed" >/dev/null 2>&1
  cmp -s "$tmp/$a-whole/$out" "$tmp/$a-killed/$out"; check "$a resume: the final $out is byte-identical" $?
done

# --- bad input ----------------------------------------------------------------------------------------
t=(-m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/bad")
expect "unknown key suggests the nearest" 2 "unknown key 'training.lrr'.*did you mean 'training.lr'" -- "$bin" train "${t[@]}" --set training.lrr=1
expect "wrong value type names the key" 2 "training.steps" -- "$bin" train "${t[@]}" --set training.steps=ten
printf '{"text": "fine"}\n{"text": "broken"\n' > "$tmp/badline.jsonl"
expect "invalid JSON names file and line" 1 "badline.jsonl:2: not valid JSON" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/badline.jsonl" -o "$tmp/bad"
expect "unwritable OUTDIR" 1 "OUTDIR" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o /proc/retrograd-nope
expect "full fine-tuning refuses a quantized model" 1 "use training.method=lora" -- "$bin" train -m "$tmp/q4.gguf" -d "$tmp/chat.jsonl" -o "$tmp/bad" --set training.method=full
expect "a run over the memory limit is refused with numbers" 1 "needs [0-9.]+ MiB but the limit is" -- "$bin" train "${t[@]}" --set training.memory_limit_gb=0.001
expect "resume refuses a changed config" 1 "config differs.*training.lr" -- "$bin" train "${run[@]}" --resume "$tmp/killed" --set training.lr=5e-4
expect "resume without a checkpoint" 1 "no checkpoint" -- "$bin" train "${run[@]}" --resume "$tmp/empty-dir"
expect "a fresh run refuses an OUTDIR that holds a run" 1 "already holds a run.*--resume" -- "$bin" train -m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" -o "$tmp/f32" "${full[@]}" --set training.steps=30
expect "missing arguments" 2 "required" -- "$bin" train -m "$tmp/f32.gguf"
# A full disk during a checkpoint. A finished run has step-5 and step-10; removing step-10 leaves
# the state of a run stopped after step 5. Resumed under a 1 MiB file-size limit (SIGXFSZ ignored,
# so writes fail with EFBIG as on a full disk), the write of step-10 fails: the run must stop with
# a clear message, and step-5 must be byte for byte what it was.
frun=(-m "$tmp/f32.gguf" -d "$tmp/chat.jsonl" "${full[@]}" --set training.steps=10 --set training.save_every=5)
"$bin" train "${frun[@]}" -o "$tmp/full" >/dev/null 2>&1
rm -rf "$tmp/full/checkpoints/step-10" "$tmp/full/model.gguf"
cp "$tmp/full/checkpoints/step-5/state.gguf" "$tmp/step5.copy"
( trap '' XFSZ; ulimit -f 1024; exec "$bin" train "${frun[@]}" --resume "$tmp/full" ) >"$tmp/full.log" 2>&1; rc=$?
[ "$rc" != 0 ] && [ "$rc" -lt 128 ]; check "full disk: the run fails cleanly (exit $rc)" $?
grep -q "previous checkpoint.*intact" "$tmp/full.log"; check "full disk: the message says the previous checkpoint is intact" $? "$(tail -1 "$tmp/full.log")"
cmp -s "$tmp/step5.copy" "$tmp/full/checkpoints/step-5/state.gguf"; check "full disk: step-5 is unchanged" $?
! ls -a "$tmp/full/checkpoints" | grep -q 'step-10'; check "full disk: no step-10, complete or partial, is left" $?
expect "full disk: the run resumes once there is room" 0 "done: 10 steps" -- "$bin" train "${frun[@]}" --resume "$tmp/full"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
