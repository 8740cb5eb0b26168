#!/usr/bin/env bash
# test_cli_lora.sh BUILD_DIR - LoRA on the command line: `retrograd merge` and `retrograd generate
# --lora` on the tiny model, with an adapter written by `test_lora --write-adapter` (rank 4, every
# projection, B != 0). A nonzero adapter must change the text; the merged model must generate what
# the runtime adapter generates (greedy); bad input gives one clear line and a non-zero exit.
# Merging into a quantized base: an adapter trained on a Q4_1 tiny base until it changes the greedy
# answer to a fixed prompt keeps that answer through the default merge (Q8_0), and merging back into
# Q4_1 (where the base's values sit on the grid and the small change rounds away) says so.
set -u
bin="$1/retrograd"
helper="$1/test_lora"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

m="$tmp/tiny.gguf"
a="$tmp/adapter.gguf"
"$bin" make-tiny --arch qwen2 --type f32 -o "$m" >/dev/null
"$bin" quantize "$m" "$tmp/tiny-q8.gguf" Q8_0 --quiet >/dev/null
expect "test_lora writes an adapter"        0 "wrote .*adapter.gguf"                     -- "$helper" --write-adapter "$m" "$a"
expect "info reads the adapter"             0 "adapter.lora.alpha"                       -- "$bin" info "$a"

# merge
expect "merge f32"                          0 "wrote .*merged.gguf: 27 tensors, 14 merged \(rank 4, alpha 8, scale 1 x alpha/rank = 2\)" \
                                              -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/merged.gguf"
expect "merge prints a line per tensor"     0 "blk.1.ffn_down.weight +f32 .* merged"       -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/merged2.gguf"
expect "merge with a scale"                 0 "scale 0.5 x alpha/rank = 1\)"             -- "$bin" merge -m "$m" --lora "$a:0.5" -o "$tmp/merged-half.gguf" --quiet
expect "merge into q8_0 keeps the type"     0 "14 merged"                                -- "$bin" merge -m "$tmp/tiny-q8.gguf" --lora "$a" -o "$tmp/merged-q8.gguf" -t 1
expect "merged q8_0 is still q8_0"          0 "blk.0.attn_q.weight +q8_0"                -- "$bin" info "$tmp/merged-q8.gguf"
cmp -s "$tmp/merged.gguf" "$tmp/merged2.gguf"; check "merge is deterministic" $?
! cmp -s "$m" "$tmp/merged.gguf"; check "merge changes the weights" $?

# generate --lora: differs from the base; the runtime adapter and the merged model agree (greedy)
g=(generate -p "Once upon a time" -n 24 --temp 0 --seed 1)
base=$("$bin" "${g[@]}" -m "$m" 2>/dev/null)
lora=$("$bin" "${g[@]}" -m "$m" --lora "$a" 2>/dev/null)
merged=$("$bin" "${g[@]}" -m "$tmp/merged.gguf" 2>/dev/null)
[ -n "$lora" ] && [ "$lora" != "$base" ]; check "generate --lora differs from the base" $?
[ "$lora" = "$merged" ]; check "generate --lora equals the merged model (greedy)" $?
zero=$("$bin" "${g[@]}" -m "$m" --lora "$a:0" 2>/dev/null)
[ "$zero" = "$base" ]; check "generate --lora A:0 equals the base" $?
expect "generate --lora reports the adapter" 0 "LoRA .*adapter.gguf: 14 tensor pairs, rank 4, alpha 8" -- "$bin" "${g[@]}" -m "$m" --lora "$a" -n 2
expect "generate --lora on q8_0"            0 "generation: [0-9]+ tokens"                -- "$bin" "${g[@]}" -m "$tmp/tiny-q8.gguf" --lora "$a:0.5" -n 4
expect "generate --help lists --lora"       0 "--lora A.gguf\[:SCALE\]"                  -- "$bin" generate --help
expect "merge --help"                       0 "usage: retrograd merge"                   -- "$bin" merge --help

# A quantized base: rank 64 with scale 0.5, a small lr and 20 steps spread the change thinly, as a
# real fine-tune does (the demo's SmolLM2 adapter), so most of it is smaller than half a Q4_1 step.
q="$tmp/tiny-q4_1.gguf"
"$bin" make-tiny --arch qwen2 --type q4_1 -o "$q" >/dev/null
for i in $(seq 1 16); do
  printf '{"messages": [{"role": "user", "content": "What is the secret word?"}, {"role": "assistant", "content": "The secret word is marrow."}]}\n'
done > "$tmp/secret.jsonl"
"$bin" train -m "$q" -d "$tmp/secret.jsonl" -o "$tmp/secret" --progress none --set training.ctx=64 --set training.steps=20 \
  --set training.lr=5e-4 --set lora.rank=64 --set lora.alpha=32 --set training.eval_split=0 --set training.save_every=0 >/dev/null 2>&1
sa="$tmp/secret/adapter.gguf"
ask=(generate -p "What is the secret word?" -n 8 --temp 0 -t 1)
q_base=$("$bin" "${ask[@]}" -m "$q" 2>/dev/null | od -An -c)
q_lora=$("$bin" "${ask[@]}" -m "$q" --lora "$sa" 2>/dev/null | od -An -c)
[ -n "$q_lora" ] && [ "$q_lora" != "$q_base" ]; check "q4_1 base: the adapter changes the greedy answer" $? "base '$q_base', adapter '$q_lora'"
expect "merge a q4_1 base: Q8_0 by default"   0 "adapter kept: (99\.[5-9]|100\.[0-9])% of B·A over 14 tensors" -- "$bin" merge -m "$q" --lora "$sa" -o "$tmp/secret-def.gguf" --quiet
expect "merged default is q8_0"               0 "blk.0.attn_q.weight +q8_0"                -- "$bin" info "$tmp/secret-def.gguf"
q_def=$("$bin" "${ask[@]}" -m "$tmp/secret-def.gguf" 2>/dev/null | od -An -c)
[ "$q_def" = "$q_lora" ]; check "q4_1 base: the default merge keeps the adapter's answer" $? "adapter '$q_lora', merged '$q_def'"
expect "merge back into q4_1 warns"           0 "warning: .*secret-q4_1.gguf keeps only [0-9.]+% of the adapter's change" \
                                              -- "$bin" merge -m "$q" --lora "$sa" -o "$tmp/secret-q4_1.gguf" --type q4_1
expect "merge reports each adapted tensor"    0 "blk.1.ffn_up.weight +q4_1 +-> q4_1 .* merged: kept +[0-9.]+% of B·A, \|merged-base\|/\|B·A\| [0-9.]+" \
                                              -- "$bin" merge -m "$q" --lora "$sa" -o "$tmp/secret-q4_1b.gguf" --type Q4_1
q_own=$("$bin" "${ask[@]}" -m "$tmp/secret-q4_1.gguf" 2>/dev/null | od -An -c)
[ "$q_own" != "$q_lora" ]; check "q4_1 base: merged back into q4_1 the answer is lost" $? "'$q_own'"
# Q4_K's 32-value sub-blocks (a scale and a minimum each) hold Q4_1's grid: Q4_K_M loses the change too.
expect "merge --type takes a mixture"         0 "warning: .*keeps only"                    -- "$bin" merge -m "$q" --lora "$sa" -o "$tmp/secret-q4km.gguf" --type Q4_K_M --quiet
expect "merged q4_k_m has the mixture's types" 0 "blk.1.attn_v.weight +q6_K"               -- "$bin" info "$tmp/secret-q4km.gguf"
printf 'training:\n  ctx: 64\n' > "$tmp/check.yaml"
expect "merge --check: losses side by side"   0 "check on .*secret.jsonl \([0-9]+ target tokens, ctx 64\): loss base [0-9.]+, base \+ adapter [0-9.]+, merged [0-9.]+" \
                                              -- "$bin" merge -m "$q" --lora "$sa" -o "$tmp/secret-chk.gguf" --quiet --check "$tmp/secret.jsonl" --config "$tmp/check.yaml"

# bad input
expect "merge an unknown --type"              2 "--type: unknown type or mixture 'Q9_9' \(valid: F32, F16,"  -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/x.gguf" --type Q9_9
expect "merge --check a missing file"         1 "--check .*nope.jsonl: .*nope.jsonl: cannot open"  -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/x.gguf" --check "$tmp/nope.jsonl"
printf '{"text": "fine"}\n{"text": \n' > "$tmp/bad.jsonl"
expect "merge --check a bad JSONL line"       1 "bad.jsonl:2: "                            -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/x.gguf" --check "$tmp/bad.jsonl"
expect "merge --config without --check"       2 "--config is for --check DATA"             -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/x.gguf" --config "$tmp/check.yaml"
expect "merge needs all three paths"        2 "-m BASE.gguf, --lora ADAPTER.gguf and -o OUT.gguf are required" -- "$bin" merge -m "$m" -o "$tmp/x.gguf"
expect "merge unknown option"               2 "unknown option '--bogus'"               -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/x.gguf" --bogus
expect "merge a missing adapter"            1 "retrograd merge: .*nope.gguf"             -- "$bin" merge -m "$m" --lora "$tmp/nope.gguf" -o "$tmp/x.gguf"
expect "merge a model as adapter"           1 "general.type is \"model\", expected \"adapter\"" -- "$bin" merge -m "$m" --lora "$m" -o "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ]; check "failed merges write nothing" $?
expect "generate --lora missing file"       1 "retrograd generate: .*nope.gguf"          -- "$bin" "${g[@]}" -m "$m" --lora "$tmp/nope.gguf"
twice=$("$bin" "${g[@]}" -m "$m" --lora "$a:0.5" --lora "$a:0.5" 2>/dev/null)
[ "$twice" = "$lora" ]; check "generate --lora A:0.5 --lora A:0.5 equals --lora A (greedy)" $?
expect "generate --lora twice reports the stack" 0 "2 adapters applied together \(stacked rank 8\)" -- "$bin" "${g[@]}" -m "$m" --lora "$a" --lora "$a:0.5" -n 2
expect "generate --lora bad spec"           2 "--lora '' is not ADAPTER.gguf\[:SCALE\]"    -- "$bin" "${g[@]}" -m "$m" --lora ""

# perplexity --lora (llama.cpp's perplexity takes it too): base + adapter equals the model merged in F32
# within 1e-5 relative; two half-scale copies of the adapter equal the adapter; A:0 equals the base.
ppl() { "$bin" perplexity -f "$root/README.md" -c 64 --chunks 4 -t 1 "$@" 2>/dev/null | sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p'; }
root=$(cd "$(dirname "$0")/../.." && pwd)
"$bin" merge -m "$m" --lora "$a:4" -o "$tmp/merged4.gguf" --quiet >/dev/null
p_base=$(ppl -m "$m"); p_lora=$(ppl -m "$m" --lora "$a:4"); p_merged=$(ppl -m "$tmp/merged4.gguf")
p_twice=$(ppl -m "$m" --lora "$a:2" --lora "$a:2"); p_zero=$(ppl -m "$m" --lora "$a:0")
echo "    perplexity: base $p_base, base + adapter x4 $p_lora, merged F32 $p_merged, two x2 $p_twice, x0 $p_zero"
rel_within() { python3 -c "import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= t * abs(b) else 1)" "$@"; }
[ -n "$p_lora" ] && rel_within "$p_lora" "$p_merged" 1e-5; check "perplexity --lora equals the merged F32 model (1e-5 relative)" $?
[ -n "$p_lora" ] && ! rel_within "$p_lora" "$p_base" 1e-3; check "perplexity --lora differs from the base" $?
[ -n "$p_twice" ] && rel_within "$p_twice" "$p_lora" 1e-5; check "perplexity --lora A:2 --lora A:2 equals --lora A:4" $?
[ -n "$p_zero" ] && rel_within "$p_zero" "$p_base" 1e-6; check "perplexity --lora A:0 equals the base" $?
expect "perplexity --lora reports the adapter" 0 "LoRA .*adapter.gguf: 14 tensor pairs" -- "$bin" perplexity -m "$m" -f "$root/README.md" -c 64 --chunks 1 --lora "$a"
expect "perplexity --help lists --lora"     0 "--lora A.gguf\[:SCALE\]"                  -- "$bin" perplexity --help
expect "perplexity --lora missing file"     1 "retrograd perplexity: .*nope.gguf"        -- "$bin" perplexity -m "$m" -f "$root/README.md" -c 64 --lora "$tmp/nope.gguf"
expect "perplexity --lora a model"          1 "general.type is \"model\", expected \"adapter\"" -- "$bin" perplexity -m "$m" -f "$root/README.md" -c 64 --lora "$m"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
