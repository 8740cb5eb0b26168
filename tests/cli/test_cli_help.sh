#!/usr/bin/env bash
# test_cli_help.sh BUILD_DIR - every command's options, as its --help lists them and its
# parser takes them (one table, tools/cli/cli_args.c). No model needed.
#   - `retrograd CMD --help` (and -h) exits 0 on stdout, in the shape the docs checker reads:
#     a first line `usage: retrograd CMD ...`, then a line per option `  -x, --name VALUE  text`
#     or `  --name VALUE  text`;
#   - it lists every option the command had before the table (the list below), and every
#     option it lists is one the parser takes: spelled alone, each gives a usage error other
#     than an unknown option or a missing value;
#   - an unknown option is named, with the closest known one when one is close; an option
#     without its value is named with its metavariable.
set -u
bin="$1/retrograd"
. "$(dirname "$0")/lib.sh"

# Each command's options before the table: none may go missing.
declare -A want=(
  [info]="--json --full"
  [make-tiny]="--arch --type -o --shape --seed --twin-f32 --tied --groups --dry-run"
  [quantize]="--threads -t --pure --allow-requantize --quiet"
  [report]="--json --device"
  [generate]="-m -p -f --chat -n --n-predict --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n --seed
              -c --ctx-size -t --threads --device --flash-attn --lora --no-bos --raw --chat-template --truncate
              --verbose-prompt --profile"
  [train]="-m -d -o --config --set --resume --device --progress --exact"
  [merge]="-m --lora -o --type --check --config -t --threads --quiet"
  [perplexity]="-m -f -c --ctx-size -t --threads --chunks --device --exact --flash-attn --lora"
  [tokenize]="-m -p -f --ids --count --no-bos --no-special"
  [agent]="-m --model --tools --lora -p --prompt --system --keep --max-calls --confirm --tell-model --json -n --n-predict
           --temp --top-k --top-p --seed -c --ctx-size -t --threads --device --chat-template"
  [serve]="-m --lora --alias --host --port --api-key --api-key-file -np -c --ctx-size -t --threads --device
           --max-tokens --max-body --max-connections --max-queue --max-messages --slot-save-path --lora-dir --agent --files-dir --max-upload --job-threads"
)

# The commands, as `retrograd --help` lists them: the table above must cover each.
cmds=$("$bin" --help | sed -nE 's/^  retrograd ([a-z-]+).*/\1/p')
[ -n "$cmds" ]; check "retrograd --help lists the commands" $?

opt_re='^  (-[A-Za-z0-9], )?(--?[A-Za-z0-9][A-Za-z0-9-]*)( [^ ]+)?  '
for cmd in $cmds; do
  [ -n "${want[$cmd]:-}" ]; check "$cmd: this test knows its options" $? "add its options to want[] above"
  out=$("$bin" "$cmd" --help 2>/dev/null); rc=$?
  [ "$rc" = 0 ]; check "$cmd --help exits 0" $? "exit $rc"
  [ "$("$bin" "$cmd" -h 2>/dev/null)" = "$out" ]; check "$cmd -h prints the same as --help" $?
  head -1 <<<"$out" | grep -Eq "^usage: retrograd $cmd( |$)"; check "$cmd --help starts with its usage line" $?
  # the options it lists: each line's label (up to the two spaces before its text) as
  # "SHORT LONG [META]" or "NAME [META]"
  names="" bad=""
  while IFS= read -r label; do
    read -r a b c <<<"${label/, / }"
    if [[ "$b" == --* ]]; then names="$names $a $b"; long="$b" meta="$c"; else names="$names $a"; long="$a" meta="$b"; fi
    [ "$long" = "--help" ] && continue
    args=("$long")
    # a value for one that takes one: the first of a choice (cpu|cuda), or 1
    if [ -n "$meta" ]; then case "$meta" in *"|"*) args+=("${meta%%|*}") ;; *) args+=(1) ;; esac; fi
    err=$("$bin" "$cmd" "${args[@]}" 2>&1 >/dev/null); rc=$?
    if [ "$rc" -ge 128 ] || grep -Eq "unknown option|needs a value|takes no value" <<<"$err"; then bad="$bad ${args[*]}"; fi
  done < <(grep -E "$opt_re" <<<"$out" | sed -E 's/^  //; s/  .*//')
  missing=""
  for o in ${want[$cmd]:-}; do [[ " $names " == *" $o "* ]] || missing="$missing $o"; done
  [ -z "$missing" ]; check "$cmd --help lists every option it had" $? "missing:$missing"
  [ -z "$bad" ]; check "$cmd: every option its --help lists parses" $? "refused:$bad"
  expect "$cmd: an unknown option is named" 2 "retrograd $cmd: unknown option '--no-such-option'" \
    -- "$bin" "$cmd" --no-such-option
done

# The messages themselves, on a few options.
expect "a near miss names the closest option"  2 "unknown option '--tmp' \(did you mean --temp\?\)" -- "$bin" generate -p Hi --tmp 1
expect "a prefix names the option it starts"   2 "unknown option '--ctx' \(did you mean --ctx-size\?\)" -- "$bin" perplexity --ctx 5
expect "a missing value names the option"      2 "retrograd generate: --temp needs a value: --temp T" -- "$bin" generate -p Hi --temp
expect "a missing value, short form"           2 "retrograd train: -d needs a value: -d DATA" -- "$bin" train -m x.gguf -d
expect "--name=VALUE is a value"               2 "--top-p 1.5 is out of range" -- "$bin" generate -m x.gguf -p Hi --top-p=1.5
expect "a flag takes no =VALUE"                2 "retrograd info: --json takes no value \(given 'yes'\)" -- "$bin" info --json=yes
expect "a value may start with a dash"         2 "-n '-5' is not valid: give an integer in -1\.\." -- "$bin" generate -m x.gguf -p Hi -n -5
expect "a stray argument is named"             2 "retrograd generate: unexpected argument 'there'" -- "$bin" generate -p Hi there
expect "too many positionals are named"        2 "retrograd info: unexpected argument 'b.gguf' \(at most 1" -- "$bin" info a.gguf b.gguf
expect "a bad choice names the choices"        2 "--progress 'fast': expected auto, bar, lines or none" -- "$bin" train --progress fast
expect "train --help keeps the config keys"    0 "training\.master_weights" -- "$bin" train --help

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
