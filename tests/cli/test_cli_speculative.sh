#!/usr/bin/env bash
# test_cli_speculative.sh BUILD_DIR - `retrograd generate --draft` on the tiny models: greedy text with
# --draft ngram and with --draft-model (the model's own Q4_0 copy) is the text without it, the stats line
# counts drafts, a seed repeats sampled text, and what it cannot do is refused in one clear line.
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

m="$tmp/tiny.gguf"
"$bin" make-tiny --arch qwen2 --type f32 -o "$m" >/dev/null
"$bin" quantize "$m" "$tmp/tiny-q4_0.gguf" Q4_0 --quiet >/dev/null
"$bin" make-tiny --arch lfm2 --type f32 -o "$tmp/lfm2.gguf" >/dev/null
"$bin" make-tiny --arch mamba2 --type f32 -o "$tmp/mamba2.gguf" >/dev/null
g=("$bin" generate -m "$m")
text="the quick brown fox jumps over the lazy dog; the quick brown fox jumps over the lazy dog; the quick brown"
spec='speculative: [0-9]+ drafted, [0-9]+ accepted \([0-9.]+%\) in [0-9]+ verification batches'

# greedy: the same text with and without speculation (and with another --draft-max)
a=$("${g[@]}" -p "$text" --raw -n 48 --temp 0 2>/dev/null)
b=$("${g[@]}" -p "$text" --raw -n 48 --temp 0 --draft ngram 2>/dev/null)
c=$("${g[@]}" -p "$text" --raw -n 48 --temp 0 --draft ngram --draft-max 3 2>/dev/null)
d=$("${g[@]}" -p "$text" --raw -n 48 --temp 0 --draft-model "$tmp/tiny-q4_0.gguf" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "greedy --draft ngram gives the text without it" $? "without '$a', with '$b'"
[ "$a" = "$c" ]; check "greedy --draft ngram --draft-max 3 gives the text without it" $? "'$c'"
[ "$a" = "$d" ]; check "greedy --draft-model gives the text without it" $? "'$d'"
expect "--draft ngram reports its drafts"        0 "$spec"                       -- "${g[@]}" -p "$text" --raw -n 24 --temp 0 --draft ngram
expect "--draft ngram stops at -n"               0 "generation: 5 tokens"        -- "${g[@]}" -p "$text" --raw -n 5 --temp 0 --draft ngram
expect "--draft-model reports its drafts"        0 "$spec"                       -- "${g[@]}" -p "$text" --raw -n 24 --temp 0 --draft-model "$tmp/tiny-q4_0.gguf"
expect "--draft ngram to a full context"         0 "context of 64 tokens is full" -- "${g[@]}" -p "$text" --raw -n -1 -c 64 --temp 0 --draft ngram
a=$("${g[@]}" -p "$text" --raw -n 32 --seed 5 --draft ngram 2>/dev/null)
b=$("${g[@]}" -p "$text" --raw -n 32 --seed 5 --draft ngram 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "sampled --draft ngram is reproducible with --seed" $?
# --state-save after a speculative run holds the prompt and the generated tokens but the last, as without it
"${g[@]}" -p "$text" --raw -n 12 --temp 0 --state-save "$tmp/plain.state" >/dev/null 2>&1
"${g[@]}" -p "$text" --raw -n 12 --temp 0 --draft ngram --state-save "$tmp/spec.state" >/dev/null 2>&1
cmp -s "$tmp/plain.state" "$tmp/spec.state"; check "--state-save after --draft ngram saves the state of a run without it" $?

# after --state-load the drafts see this run's tokens only; the text is still the text without them
a=$("${g[@]}" -p " the quick" --raw -n 24 --temp 0 --state-load "$tmp/plain.state" 2>/dev/null)
b=$("${g[@]}" -p " the quick" --raw -n 24 --temp 0 --state-load "$tmp/plain.state" --draft ngram 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "--draft ngram after --state-load gives the text without it" $?
# on the CUDA device (the host execution of the CUDA code unless RETRO_CUDA_HOST=0 names a GPU): the verification
# batch's logits come back, the draws on the CPU
cuda=(env RETRO_CUDA_HOST="${RETRO_CUDA_HOST:-1}" "${g[@]}" --device cuda)
if "${cuda[@]}" -p "Hi" -n 1 >/dev/null 2>&1; then
  a=$("${cuda[@]}" -p "$text" --raw -n 24 --temp 0 2>/dev/null)
  b=$("${cuda[@]}" -p "$text" --raw -n 24 --temp 0 --draft ngram 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ]; check "greedy --draft ngram on the CUDA device gives the text without it" $?
else
  echo "SKIP greedy --draft ngram on the CUDA device: this build has no CUDA device (not counted)"
fi

# --chat: two turns, greedy, the same answers with and without --draft (ngram and a draft model); the drafts see
# the conversation, and a stop inside a verified run (an end of generation among kept drafts) rewinds both
turns=$'repeat after me: the quick brown fox jumps over the lazy dog\nand once more: the quick brown fox jumps over the lazy dog'
a=$(printf '%s\n' "$turns" | "${g[@]}" --chat -n 24 --temp 0 2>/dev/null)
b=$(printf '%s\n' "$turns" | "${g[@]}" --chat -n 24 --temp 0 --draft ngram 2>/dev/null)
c=$(printf '%s\n' "$turns" | "${g[@]}" --chat -n 24 --temp 0 --draft-model "$tmp/tiny-q4_0.gguf" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ]; check "--chat greedy --draft ngram gives the answers without it" $? "without '$a', with '$b'"
[ "$a" = "$c" ]; check "--chat greedy --draft-model gives the answers without it" $? "'$c'"
out=$(printf '%s\n' "$turns" | "${g[@]}" --chat -n 24 --temp 0 --draft ngram 2>&1 >/dev/null)
[ "$(grep -cE "$spec" <<<"$out")" -ge 2 ]; check "--chat --draft ngram reports its drafts after each turn" $? "$out"

# refusals
expect "--draft with an unknown drafter"         2 "--draft takes ngram or model" -- "${g[@]}" -p "Hi" --draft tree
expect "--draft model without a model"           2 "--draft model needs --draft-model" -- "${g[@]}" -p "Hi" --draft model
expect "--draft ngram with --draft-model"        2 "not with --draft ngram"      -- "${g[@]}" -p "Hi" --draft ngram --draft-model "$tmp/tiny-q4_0.gguf"
expect "--draft-model after --state-load"        2 "--draft-model cannot follow --state-load" -- "${g[@]}" -p "Hi" --draft-model "$tmp/tiny-q4_0.gguf" --state-load "$tmp/plain.state"
expect "--draft-max 0"                           2 "--draft-max"                 -- "${g[@]}" -p "Hi" --draft ngram --draft-max 0
expect "--draft-model with another vocabulary"   1 "--draft-model .*lfm2.gguf: the draft model's vocabulary is not the target's: token [0-9]+ is" -- "${g[@]}" -p "Hi" --draft-model "$tmp/lfm2.gguf"
expect "--draft-model that is not there"         1 "--draft-model $tmp/none.gguf" -- "${g[@]}" -p "Hi" --draft-model "$tmp/none.gguf"
# a recurrent model: a rejected draft needs a rewind into its SSM state (refused until the session keeps snapshots;
# the tiny mamba2 rejects a draft of "Hello"'s continuation, the tiny lfm2 only repeats its last token)
out=$("$bin" generate -m "$tmp/mamba2.gguf" -p "Hello" --raw -n 24 --temp 0 --draft ngram 2>&1); rc=$?
if [ $rc != 0 ]; then
  grep -Eq "speculative decoding cannot drop the rejected drafts: session: rewind to position [0-9]+ of [0-9]+: .*no snapshot" <<<"$out"
  check "--draft ngram on mamba2 is refused naming the rewind" $? "$(tail -1 <<<"$out")"
else
  plain=$("$bin" generate -m "$tmp/mamba2.gguf" -p "Hello" --raw -n 24 --temp 0 2>/dev/null)
  spec_text=$("$bin" generate -m "$tmp/mamba2.gguf" -p "Hello" --raw -n 24 --temp 0 --draft ngram 2>/dev/null)
  [ "$spec_text" = "$plain" ]; check "--draft ngram on mamba2 gives the text without it" $?
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
