#!/usr/bin/env bash
# test_cli_generate.sh BUILD_DIR - `retrograd generate` and `retrograd perplexity` on the tiny
# model: its text is gibberish, but runs must succeed, repeat with --seed, stop at -n, and
# bad input must give one clear line, a non-zero exit and no crash.
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"


m="$tmp/tiny.gguf"
"$bin" make-tiny --arch qwen2 --type f32 -o "$m" >/dev/null
for i in $(seq 1 120); do echo "Line $i: the quick brown fox jumps over the lazy dog, and the cat sat on the mat."; done > "$tmp/text.txt"
printf 'too short' > "$tmp/short.txt"
printf 'Tell me a story about a dragon.' > "$tmp/prompt.txt"
printf 'caf\xe9 \xff\xfe bytes' > "$tmp/bad-utf8.txt"
long=$(for i in $(seq 1 40); do printf 'word%d ' "$i"; done)

stats='prompt: [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tok/s\) \| generation: [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tok/s\)'
g=("$bin" generate -m "$m")

# generation
expect "generate prints timings"             0 "$stats"                               -- "${g[@]}" -p "Hello" -n 8
expect "generate stops at -n"                0 "generation: 16 tokens"                -- "${g[@]}" -p "Hello" -n 16 --seed 3
expect "generate -n 0 only reads the prompt" 0 "generation: 0 tokens"                 -- "${g[@]}" -p "Hello" -n 0
expect "generate greedy"                     0 "generation: [0-9]+ tokens"            -- "${g[@]}" -p "Hello" -n 8 --temp 0
expect "generate --raw"                      0 "prompt: [1-9] tokens"                   -- "${g[@]}" -p "Hello" --raw -n 4
expect "generate -f FILE"                    0 "$stats"                               -- "${g[@]}" -f "$tmp/prompt.txt" -n 4
expect "generate with every sampler option"  0 "$stats"                               -- "${g[@]}" -p "Hi" -n 8 --temp 1.2 --top-k 5 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.3 --repeat-last-n 16 --seed 9 -t 1
expect "generate --repeat-last-n -1"         0 "$stats"                               -- "${g[@]}" -p "Hi" -n 4 --repeat-penalty 1.1 --repeat-last-n -1
expect "generate -n -1 stops at a full context" 0 "context of 64 tokens is full"      -- "${g[@]}" -p "Hi" -n -1 -c 64 --temp 0 --top-k 0 --min-p 0 --top-p 1 --seed 1
expect "generate shows the prompt tokens"    0 "<\|im_start\|>'.*'user'|<\|im_start\|>' .*'u'"  -- "${g[@]}" -p "Hi" -n 2 --verbose-prompt
expect "generate warns on invalid UTF-8"     0 "warning: the prompt is not valid UTF-8 \(first invalid byte at offset 3\)" -- "${g[@]}" -f "$tmp/bad-utf8.txt" -n 2
expect "generate --truncate keeps the end"   0 "cut to its last [0-9]+ to fit -c 32"  -- "${g[@]}" -p "$long" --raw -c 32 -n 4 --truncate
expect "generate --profile shows the ops"    0 "profile: [0-9]+ runs, [0-9.]+ ms per run" -- "${g[@]}" -p "Hi" -n 4 --profile
expect "generate --profile splits MUL_MAT"   0 "MUL_MAT f32 +[0-9]+ nodes"            -- "${g[@]}" -p "Hi" -n 4 --profile
expect "generate --profile names the cache attention" 0 "attn_decode +[0-9]+ nodes" -- "${g[@]}" -p "Hi" -n 4 --profile

# the same seed gives the same text; another seed, another text
a=$("${g[@]}" -p "Once upon a time" -n 24 --seed 7 2>/dev/null)
b=$("${g[@]}" -p "Once upon a time" -n 24 --seed 7 2>/dev/null)
c=$("${g[@]}" -p "Once upon a time" -n 24 --seed 8 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "generate is reproducible with --seed" $?
[ "$a" != "$c" ]; check "generate differs with another seed" $?
a=$("${g[@]}" -p "Once upon a time" -n 24 --temp 0 --seed 1 2>/dev/null)
b=$("${g[@]}" -p "Once upon a time" -n 24 --temp 0 --seed 2 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "greedy ignores the seed" $?
a=$("${g[@]}" -p "Once upon a time" -n 24 --seed 7 -t 1 2>/dev/null)
b=$("${g[@]}" -p "Once upon a time" -n 24 --seed 7 -t 2 2>/dev/null)
[ "$a" = "$b" ]; check "generate is the same with 1 and 2 threads" $?

# --flash-attn: the prompt batch through flash attention over the KV cache gives the materialized path's greedy
# text (test_session has the logits); the profile names the op; on is refused on a device, naming why.
a=$("${g[@]}" -p "Once upon a time there was" -n 24 --temp 0 --flash-attn off 2>/dev/null)
b=$("${g[@]}" -p "Once upon a time there was" -n 24 --temp 0 --flash-attn on 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "generate --flash-attn on gives the greedy text of off" $? "off '$a', on '$b'"
expect "generate --flash-attn on profiles the op" 0 "flash_attn_ext +[0-9]+ nodes"    -- "${g[@]}" -p "Hi there" -n 2 --profile --flash-attn on
expect "generate --flash-attn on on a device" 1 "FLASH_ATTN_EXT has no CUDA kernel"   -- "${g[@]}" -p "Hi" -n 2 --flash-attn on --device cuda
expect "generate bad --flash-attn"           2 "--flash-attn must be auto, on or off, not 'yes'" -- "${g[@]}" -p "Hi" --flash-attn yes

# chat
expect "chat answers and ends at /exit"      0 "generation: [0-9]+ tokens.*"          -- bash -c "printf 'Hi\n/exit\n' | \"\$0\" generate -m \"\$1\" --chat -n 6" "$bin" "$m"
expect "chat keeps the history in the cache" 0 "tokens after [1-9][0-9]* cached: [0-9]+:'(<\|im_end\|>|[^']*)'" -- bash -c "printf 'Hi\nAgain\n' | \"\$0\" generate -m \"\$1\" --chat -n 6 --verbose-prompt" "$bin" "$m"
expect "chat ends at end of input"           0 "> "                                   -- bash -c "\"\$0\" generate -m \"\$1\" --chat -n 4 </dev/null" "$bin" "$m"
expect "chat that outgrows the context"      1 "no longer fits the context of 48|context of 48 tokens is full" -- bash -c "printf 'Hi\nHi again\nAnd again\nOnce more\n' | \"\$0\" generate -m \"\$1\" --chat -n 8 -c 48" "$bin" "$m"

# bad input
expect "generate without -m"                 2 "-m MODEL.gguf is required"            -- "$bin" generate -p "Hi"
expect "generate without a prompt"           2 "exactly one of -p TEXT, -f FILE or --chat" -- "${g[@]}"
expect "generate with -p and --chat"         2 "exactly one of -p TEXT, -f FILE or --chat" -- "${g[@]}" -p "Hi" --chat
expect "generate bad --top-p"                2 "--top-p 1.5 is out of range: valid is \(0, 1\]" -- "${g[@]}" -p "Hi" --top-p 1.5
expect "generate --top-p 0"                  2 "--top-p 0 is out of range"            -- "${g[@]}" -p "Hi" --top-p 0
expect "generate bad --min-p"                2 "--min-p 1 is out of range: valid is \[0, 1\)" -- "${g[@]}" -p "Hi" --min-p 1
expect "generate bad --top-k"                2 "--top-k -3 is out of range"           -- "${g[@]}" -p "Hi" --top-k -3
expect "generate bad --repeat-penalty"       2 "--repeat-penalty 0 is out of range: valid is a finite number > 0" -- "${g[@]}" -p "Hi" --repeat-penalty 0
expect "generate bad --repeat-last-n"        2 "--repeat-last-n '-2' is not valid: give an integer in -1\.\." -- "${g[@]}" -p "Hi" --repeat-last-n -2
expect "generate non-numeric --temp"         2 "--temp 'hot' is not a number"         -- "${g[@]}" -p "Hi" --temp hot
expect "generate bad --seed"                 2 "--seed 'abc' is not a non-negative integer" -- "${g[@]}" -p "Hi" --seed abc
expect "generate bad -n"                     2 "-n '-5' is not valid"                 -- "${g[@]}" -p "Hi" -n -5
expect "generate bad --device"               2 "--device must be cpu or cuda, not 'tpu'" -- "${g[@]}" -p "Hi" --device tpu
expect "generate unknown option"             2 "unknown option '--tmp'"             -- "${g[@]}" -p "Hi" --tmp 1
expect "generate option without a value"     2 "--temp needs a value"                 -- "${g[@]}" -p "Hi" --temp
expect "generate prompt longer than -c"      1 "the prompt is [0-9]+ tokens but the context \(-c\) holds 16" -- "${g[@]}" -p "$long" -c 16
expect "generate missing model"              1 "nope.gguf: cannot open"               -- "$bin" generate -m "$tmp/nope.gguf" -p "Hi"
expect "generate missing prompt file"        1 "nope.txt: cannot read the file"       -- "${g[@]}" -f "$tmp/nope.txt"
expect "generate --help"                     0 "usage: retrograd generate"            -- "$bin" generate --help

# --device cuda: without a GPU it fails with the driver's reason; with RETRO_CUDA_HOST=1 it runs on the
# host execution of the CUDA code, says so on stderr, and greedy decoding gives the CPU's text.
if "$bin" report | grep -Eq "^gpu_device +none"; then
  expect "generate --device cuda without a GPU" 1 "cuda device 0: .*(no usable CUDA device|no CUDA device|built without CUDA)" -- "${g[@]}" -p "Hello" -n 4 --device cuda
fi
if RETRO_CUDA_HOST=1 "$bin" report 2>/dev/null | grep -Eq "^gpu_device +host execution"; then
  expect "generate --device cuda, host execution" 0 "RETRO_CUDA_HOST=1: the CUDA device is the host execution of the CUDA code \(not a GPU\)" -- env RETRO_CUDA_HOST=1 "${g[@]}" -p "Hello" -n 8 --temp 0 --device cuda
  a=$("${g[@]}" -p "Hello" -n 8 --temp 0 2>/dev/null | head -1)
  b=$(RETRO_CUDA_HOST=1 "${g[@]}" -p "Hello" -n 8 --temp 0 --device cuda 2>/dev/null | head -1)
  [ -n "$a" ] && [ "$a" = "$b" ]; check "host execution gives the CPU's greedy text" $? "cpu '$a', host execution '$b'"
fi

# perplexity
p=("$bin" perplexity -m "$m")
expect "perplexity prints chunks and the estimate" 0 "^\[1\][0-9]+\.[0-9]{4},\[2\][0-9]+\.[0-9]{4},.*" -- "${p[@]}" -f "$tmp/text.txt" -c 128
expect "perplexity final estimate"           0 "Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}" -- "${p[@]}" -f "$tmp/text.txt" -c 128
expect "perplexity --chunks"                 0 "^\[1\][0-9.]+,\[2\][0-9.]+,$"           -- bash -c "\"\$@\" 2>/dev/null | head -1" _ "${p[@]}" -f "$tmp/text.txt" -c 64 --chunks 2
expect "perplexity default context"          0 "chunks of 256 "                       -- "${p[@]}" -f "$tmp/text.txt"
a=$("${p[@]}" -f "$tmp/text.txt" -c 64 --chunks 3 2>/dev/null)
b=$("${p[@]}" -f "$tmp/text.txt" -c 64 --chunks 3 -t 1 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "perplexity is reproducible" $?
a=$("${p[@]}" -f "$tmp/text.txt" -c 128 --flash-attn off 2>&1 | grep -Eo "PPL = [0-9.]+" | cut -d' ' -f3)
b=$("${p[@]}" -f "$tmp/text.txt" -c 128 --flash-attn on 2>&1 | grep -Eo "PPL = [0-9.]+" | cut -d' ' -f3)
[ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d * d <= 1e-8 * a * a) }'
check "perplexity --flash-attn on within 1e-4 of off" $? "off $a, on $b"
expect "perplexity bad --flash-attn"         2 "--flash-attn must be auto, on or off, not '1'" -- "${p[@]}" -f "$tmp/text.txt" --flash-attn 1
expect "perplexity of a too-short file"      1 "short.txt: [0-9]+ tokens is too short for one chunk of -c 256 tokens" -- "${p[@]}" -f "$tmp/short.txt"
expect "perplexity without -f"               2 "-f TEXT.txt is required"              -- "${p[@]}"
expect "perplexity without -m"               2 "-m MODEL.gguf is required"            -- "$bin" perplexity -f "$tmp/text.txt"
expect "perplexity bad -c"                   2 "-c '2' is not valid: give an integer in 4\.\." -- "${p[@]}" -f "$tmp/text.txt" -c 2
expect "perplexity missing file"             1 "nope.txt: cannot read the file"       -- "${p[@]}" -f "$tmp/nope.txt"
expect "perplexity unknown option"           2 "unknown option '--ctx'"             -- "${p[@]}" -f "$tmp/text.txt" --ctx 5

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
