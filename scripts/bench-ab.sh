#!/usr/bin/env bash
# bench-ab.sh A_DIR B_DIR [ROUNDS] - bench_train and bench_generate of two builds, interleaved
# in one run (A B B A A B ...), so both sides see the same drift of this VM's speed. Prints, per
# row, each side's median tokens/s over the rounds, its min-max spread, and the ratio B / A of
# the medians. A_DIR and B_DIR hold the bench_train and bench_generate binaries (a build
# directory each, e.g. a baseline commit's build and this one's).
#
#   RG_SMOLLM2              the SmolLM2-135M Q4_1 GGUF (scripts/smollm2.sh)
#   RG_AB_TRAIN="3 smollm2" bench_train's arguments (STEPS FILTER; "" skips bench_train)
#   RG_AB_TYPES=f32,q4_1    bench_generate's types ("" skips bench_generate); RG_BENCH_CACHE keeps
#                           its quantized files between the runs (default: a temporary folder)
# Never run two benchmarks at once; nothing else should load the machine meanwhile.
set -euo pipefail
a="${1:?usage: bench-ab.sh A_DIR B_DIR [ROUNDS]}"; b="${2:?usage: bench-ab.sh A_DIR B_DIR [ROUNDS]}"
rounds="${3:-3}"
train_args="${RG_AB_TRAIN-3 smollm2}"
types="${RG_AB_TYPES-f32,q4_1}"
: "${RG_SMOLLM2:?set RG_SMOLLM2 to the SmolLM2-135M Q4_1 GGUF (bash scripts/smollm2.sh)}"
tmp=$(mktemp -d)
trap '[ -n "${RG_AB_KEEP:-}" ] || rm -rf "$tmp"' EXIT
export RG_BENCH_CACHE="${RG_BENCH_CACHE:-$tmp/cache}"
mkdir -p "$RG_BENCH_CACHE"

# run SIDE DIR: one round of both benches, rows appended to $tmp/rows as "SIDE<TAB>ROW<TAB>TOK/S".
run() {
  local side="$1" dir="$2"
  if [ -n "$train_args" ]; then
    # shellcheck disable=SC2086
    "$dir/bench_train" $train_args >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "bench_train ($side) failed"; exit 1; }
    awk -v s="$side" '/ tok\/s/ { for (i = 2; i <= NF; i++) if ($i == "tok/s") { name = $1; for (j = 2; j < i - 1; j++) name = name " " $j;
                                  printf "%s\ttrain %s\t%s\n", s, name, $(i - 1); break } }' "$tmp/out" >>"$tmp/rows"
  fi
  if [ -n "$types" ]; then
    RG_BENCH_TYPES="$types" "$dir/bench_generate" >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "bench_generate ($side) failed"; exit 1; }
    # a type's row: its label (words up to the first number), prompt tok/s, gen tok/s, ...
    awk -v s="$side" '/^type / { t = 1; next } t && NF >= 4 && $0 !~ /^\(/ {
                        k = 1; name = $1; while (k < NF && $(k + 1) !~ /^[0-9.]+$/) { k++; name = name " " $k }
                        printf "%s\tgen %s pp\t%s\n%s\tgen %s tg\t%s\n", s, name, $(k + 1), s, name, $(k + 2) }' \
      "$tmp/out" >>"$tmp/rows"
  fi
}

for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then run A "$a"; run B "$b"; else run B "$b"; run A "$a"; fi
  echo "round $r of $rounds done" >&2
done

echo "bench-ab: A = $a, B = $b, $rounds rounds interleaved; tokens/s: median [min-max] per side, B/A of the medians"
awk -F'\t' '
  { key = $2; if (!(key in seen)) { seen[key] = 1; order[++n] = key } v[$1, key, ++c[$1, key]] = $3 + 0 }
  function med(side, key,   k, i, j, t, a) {
    k = c[side, key]; for (i = 1; i <= k; i++) a[i] = v[side, key, i]
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[k]; return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= n; i++) {
      key = order[i]; ma = med("A", key); la = lo; ha = hi; mb = med("B", key)
      printf "%-40s A %9.1f [%.1f-%.1f]   B %9.1f [%.1f-%.1f]   B/A %.3f\n", key, ma, la, ha, mb, lo, hi, (ma > 0 ? mb / ma : 0)
    }
  }' "$tmp/rows"
