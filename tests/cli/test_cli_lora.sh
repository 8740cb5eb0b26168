#!/usr/bin/env bash
# test_cli_lora.sh BUILD_DIR - LoRA on the command line: `retrograd merge` and `retrograd generate
# --lora` on the tiny model, with an adapter written by `test_lora --write-adapter` (rank 4, every
# projection, B != 0). A nonzero adapter must change the text; the merged model must generate what
# the runtime adapter generates (greedy); bad input gives one clear line and a non-zero exit.
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

# bad input
expect "merge needs all three paths"        2 "-m BASE.gguf, --lora ADAPTER.gguf and -o OUT.gguf are required" -- "$bin" merge -m "$m" -o "$tmp/x.gguf"
expect "merge unknown option"               2 "unknown argument '--bogus'"               -- "$bin" merge -m "$m" --lora "$a" -o "$tmp/x.gguf" --bogus
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
