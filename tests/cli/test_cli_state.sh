#!/usr/bin/env bash
# test_cli_state.sh BUILD_DIR - `retrograd generate --state-save / --state-load` on the tiny models (qwen2, and
# lfm2 with its recurrent state): P1 saved, then P2 after the loaded state, gives the text of P1 + P2 in one run,
# greedy and drawn with a seed, token for token (the prompts' tokens checked to be P1's then P2's, so the two runs evaluate the same
# sequence; P2 alone gives another text); a state from another model, a missing file, a missing directory and --chat are refused by name.
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

p1="Once upon a time"
p2=" there was a dragon who lived in"
# The token ids of the evaluated prompt, from --verbose-prompt's line on stderr (file $1).
prompt_ids() { grep -m1 -E "^[0-9]+ tokens after [0-9]+ cached:" "$1" | grep -oE " [0-9]+:'" | tr -d " :'" | tr '\n' ' '; }

# Greedy, and drawn at temperature 1 with a seed (the tiny lfm2 repeats its last token greedily whatever came
# before, so only the draws show that the loaded state is used: P2 alone draws another text).
sampled=(--temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 7)
for arch in qwen2 lfm2; do
  m="$tmp/$arch.gguf"
  "$bin" make-tiny --arch "$arch" --type f32 -o "$m" >/dev/null
  for mode in greedy sampled; do
    if [ "$mode" = greedy ]; then how=(--temp 0); else how=("${sampled[@]}"); fi
    g=("$bin" generate -m "$m" --raw --verbose-prompt -t 2 "${how[@]}")
    st="$tmp/$arch.state"
    "${g[@]}" -p "$p1" -n 0 --state-save "$st" >/dev/null 2>"$tmp/e1"; rc1=$?
    out2=$("${g[@]}" -p "$p2" -n 16 --state-load "$st" 2>"$tmp/e2"); rc2=$?
    out3=$("${g[@]}" -p "$p1$p2" -n 16 2>"$tmp/e3"); rc3=$?
    [ "$rc1$rc2$rc3" = 000 ]; check "$arch $mode: the three runs succeed" $? "exit codes $rc1 $rc2 $rc3: $(cat "$tmp/e1" "$tmp/e2" | head -3)"
    ids1=$(prompt_ids "$tmp/e1") ids2=$(prompt_ids "$tmp/e2") ids3=$(prompt_ids "$tmp/e3")
    n1=$(wc -w <<<"$ids1")
    [ -n "$ids2" ] && [ "$ids1$ids2" = "$ids3" ]; check "$arch $mode: P1's tokens then P2's are P1 + P2's" $? "'$ids1' + '$ids2' vs '$ids3'"
    grep -Eq "^[0-9]+ tokens after $n1 cached:" "$tmp/e2"; check "$arch $mode: P2 follows the $n1 loaded tokens" $? "$(head -1 "$tmp/e2")"
    [ -n "$out3" ] && [ "$out2" = "$out3" ]; check "$arch $mode: --state-load + P2 gives P1 + P2's text" $? "loaded '$out2', in one go '$out3'"
    if [ "$mode" = sampled ]; then
      out4=$("${g[@]}" -p "$p2" -n 16 --no-bos 2>/dev/null)  # the comparison can fail: P2 without the state
      [ "$out4" != "$out3" ]; check "$arch $mode: P2 without the loaded state gives another text" $? "'$out4'"
    fi
  done
done

g=("$bin" generate -m "$tmp/qwen2.gguf" --raw -n 2)
expect "--state-load of another model's state" 1 "--state-load: .*lfm2.state: saved from another model: its architecture is 'lfm2'" -- "${g[@]}" -p "Hi" --state-load "$tmp/lfm2.state"
expect "--state-load of a missing file"        1 "--state-load: .*nope.state: cannot open"        -- "${g[@]}" -p "Hi" --state-load "$tmp/nope.state"
expect "--state-save into a missing directory" 1 "--state-save: .*no-dir/s.state: cannot create" -- "${g[@]}" -p "Hi" --state-save "$tmp/no-dir/s.state"
expect "--state-save with --chat"              2 "work with -p or -f, not --chat"                 -- "${g[@]}" --chat --state-save "$tmp/c.state"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
