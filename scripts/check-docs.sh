#!/usr/bin/env bash
# check-docs.sh - the docs cannot go stale (issue 23): README.md and docs/*.md are checked
# against the tree and the binary; ends with "N passed, N failed".
#
#   bash scripts/check-docs.sh [BUILD_DIR]     # default build (the retrograd binary is BUILD_DIR/retrograd)
#
# Checks, each failure naming the doc, the line and the item:
#   files    every file under src/ is named in docs/ARCHITECTURE.md: as `src/DIR/NAME` anywhere,
#            or as `NAME` on a list line ("- `NAME` — what it holds") under a heading that names
#            `src/DIR/`; and every NAME on such a line exists in that folder.
#   paths    every path the docs name in backticks or in fenced code blocks, under src/, tools/,
#            tests/, scripts/, bench/, docs/, include/, fuzz/, data/ (or a room of src/: `graph/exec.c`
#            is src/graph/exec.c) exists. Globs must match something; an upper-case component
#            (DIR, TARGET) or <name> is a placeholder and matches anything.
#   symbols  every rg_*, RG_* and RETRO_* name in backticks occurs somewhere in the code (src/,
#            include/, tools/, tests/, bench/, fuzz/, scripts/, CMake files), and every test_* name
#            there or as a test file's name (a binary, a case); `rg_cuda_*` is a prefix.
#   commands every `retrograd CMD ...` line of the fenced code blocks (a line starting
#            with [, ( or - continues the one above) parses: CMD prints `usage: retrograd CMD` on
#            --help, and each option the line uses appears in that help (its usage lines or its
#            option lines "  --name VALUE  text" / "  -x, --name VALUE  text"). Every training
#            key the docs name in backticks (`training.lr`, `lora.rank`, `data.pack`) or after
#            --set in a code block is listed by `retrograd train --help`.
# Before the docs, the checker itself is tried on a copy of them with one fault of each kind
# planted (a file line removed, a file listed that is not there, a bad path, an unknown symbol, an unknown option and key): each
# must be reported.
# RG_DOCS_ROOT checks another tree's docs against the code here (the self-test uses it);
# RG_DOCS_NO_SELFTEST=1 skips the self-test.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
code_root=$PWD
build=${1:-build}
case $build in /*) ;; *) build=$code_root/$build ;; esac
bin=$build/retrograd
root=${RG_DOCS_ROOT:-$code_root}

passed=0 failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

docs=()
[ -f "$root/README.md" ] && docs+=(README.md)
for d in "$root"/docs/*.md; do [ -f "$d" ] && docs+=("docs/$(basename "$d")"); done

# items: "DOC<TAB>LINE<TAB>KIND<TAB>ITEM" for every path, symbol, key and command the docs name.
# A fenced block (```) is code; in it every word counts, outside it only backticked spans.
(cd "$root" && awk -v OFS='\t' '
    function word_items(w, kind_ok,   m, id) {
        gsub(/^[("'\''\[]+|[)"'\'',;:.\]]+$/, "", w)
        if (w ~ /^(\.\.?\/)?(src|tools|tests|scripts|bench|docs|include|fuzz|data)\/./) {
            sub(/^\.\//, "", w); print FILENAME, FNR, "path", w
        } else if (w ~ /^(base|tensor|graph|cpu|infer|train|text|gguf|model|cuda|cuda_host)\/[A-Za-z0-9_.*<>-]+$/) {
            print FILENAME, FNR, "path", "src/" w
        }
        if (!kind_ok) return
        while (match(w, /(^|[^A-Za-z0-9_])(rg|RG|RETRO|test)_[A-Za-z0-9_]*\*?/)) {
            id = substr(w, RSTART, RLENGTH); sub(/^[^A-Za-z0-9_]/, "", id)
            if (id !~ /^(rg|RG|RETRO|test)_\*?$/) print FILENAME, FNR, "sym", id
            w = substr(w, RSTART + RLENGTH)
        }
    }
    FNR == 1 { fence = 0; cmd = "" }
    /^[[:space:]]*```/ { fence = !fence; cmd = ""; next }
    fence {
        line = $0; sub(/[[:space:]]+#[[:space:]].*$/, "", line)
        n = split(line, ws, /[[:space:]]+/)
        for (i = 1; i <= n; i++) {
            word_items(ws[i], 0)
            k = ws[i]; sub(/=.*$/, "", k)
            if (i > 1 && ws[i - 1] == "--set" && k ~ /^(training|lora|data)\.[a-z][a-z0-9_]*$/ && k !~ /\.(c|h|cu|cuh|cpp|md|py|sh|txt|json|jsonl|yaml|gguf|svg)$/) print FILENAME, FNR, "key", k
        }
        if (match(line, /(^|[[:space:]\/])retrograd[[:space:]]+[a-z][a-z0-9-]*/)) {
            cmd = substr(line, RSTART, RLENGTH); sub(/^.*retrograd[[:space:]]+/, "", cmd)
            print FILENAME, FNR, "cmd", cmd "\t" substr(line, RSTART + RLENGTH)
        } else if (cmd != "" && line ~ /^[[:space:]]*[-\[(]/) {
            print FILENAME, FNR, "cmd", cmd "\t" line
        } else cmd = ""
        next
    }
    {
        line = $0
        while (match(line, /`[^`]+`/)) {
            span = substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, RSTART + RLENGTH)
            n = split(span, ws, /[[:space:]]+/)
            for (i = 1; i <= n; i++) {
                word_items(ws[i], 1)
                k = ws[i]; sub(/=.*$/, "", k)
                if (k ~ /^(training|lora|data)\.[a-z][a-z0-9_]*$/ && k !~ /\.(c|h|cu|cuh|cpp|md|py|sh|txt|json|jsonl|yaml|gguf|svg)$/) print FILENAME, FNR, "key", k
            }
        }
    }' "${docs[@]}") >"$tmp/items"

# ---- files: every file under src/ named in ARCHITECTURE.md, every named file present.
arch=docs/ARCHITECTURE.md
if [ ! -f "$root/$arch" ]; then
    fail "$arch: missing (the map of the code, one line per file under src/)"
else
    # named: "DIR/NAME LINE" (a list line under a src/ heading, or a full src/ path anywhere);
    # sections: "DIR LINE" per heading that names a src/ folder.
    awk -v OFS='\t' '
        /^#/ { dir = ""; if (match($0, /`src\/[^`]*`/)) { dir = substr($0, RSTART + 1, RLENGTH - 2); sub(/\/$/, "", dir); print "section", dir, FNR } next }
        {
            line = $0
            while (match(line, /`src\/[^` ]+`/)) { print "named", substr(line, RSTART + 1, RLENGTH - 2), FNR; line = substr(line, RSTART + RLENGTH) }
        }
        dir != "" && /^- `/ {
            head = $0; sub(/ — .*$/, "", head)
            while (match(head, /`[^`]+`/)) {
                name = substr(head, RSTART + 1, RLENGTH - 2); head = substr(head, RSTART + RLENGTH)
                if (name !~ /\//) print "listed", dir "/" name, FNR
            }
        }' "$root/$arch" >"$tmp/arch"
    (cd "$root" && find src/ -type f | LC_ALL=C sort) >"$tmp/src_files"
    n_src=$(wc -l <"$tmp/src_files")
    # listed names that do not exist, then files that are not named, each with the line to fix
    awk -F'\t' -v arch="$arch" '
        function dir_of(p,   n, parts) { n = split(p, parts, "/"); base = parts[n]; return substr(p, 1, length(p) - length(base) - 1) }
        FILENAME == ARGV[1] { file[$0] = ++n_files; order[n_files] = $0; next }
        $1 == "section" && !($2 in sec) { sec[$2] = $3 }
        $1 == "named" || $1 == "listed" { named[$2] = 1 }
        $1 == "listed" && !($2 in file) { d = dir_of($2); printf "FAIL %s:%s: `%s` is listed under `%s/` but %s does not exist\n", arch, $3, base, d, $2 }
        END {
            for (i = 1; i <= n_files; i++) {
                f = order[i]; if (f in named) continue
                d = dir_of(f)
                if (d in sec) printf "FAIL %s:%s: %s is not named: add a line \"- `%s` — what it holds\" under this `%s/` heading\n", arch, sec[d], f, base, d
                else printf "FAIL %s: %s is not named, and no heading names `%s/`: add one with a line per file\n", arch, f, d
            }
        }' "$tmp/src_files" "$tmp/arch" >"$tmp/files_fail"
    n_bad=$(wc -l <"$tmp/files_fail")
    cat "$tmp/files_fail"; failed=$((failed + n_bad))
    [ "$n_bad" = 0 ] && pass "files: each of the $n_src files under src/ is named in $arch, and every file it lists exists"
fi

# ---- paths: every path named exists (placeholders and globs match something).
n_bad=0 n_paths=0
# the glob of each path: <name> and upper-case components (DIR, TARGET, FILE.gguf) match anything
awk -F'\t' -v OFS='\t' '$3 == "path" {
    pat = $4; gsub(/<[^>]*>/, "*", pat)
    n = split(pat, c, "/"); pat = ""
    for (i = 1; i <= n; i++) {
        if (c[i] ~ /^[A-Z][A-Z0-9_]*(\.[a-z0-9.]+)?$/ && c[i] !~ /^[A-Z][A-Z0-9_]*\.(md|txt)$/) c[i] = "*"
        pat = pat (i > 1 ? "/" : "") c[i]
    }
    sub(/\/$/, "", pat); print $1, $2, $4, pat }' "$tmp/items" >"$tmp/paths"
while IFS=$'\t' read -r doc line path pat; do
    n_paths=$((n_paths + 1))
    if [[ "$pat" == *[*?]* ]]; then
        compgen -G "$root/$pat" >/dev/null && continue
    else
        [ -e "$root/$pat" ] && continue
    fi
    fail "$doc:$line: path \`$path\` does not exist"
    n_bad=$((n_bad + 1))
done <"$tmp/paths"
[ "$n_bad" = 0 ] && pass "paths: the $n_paths paths named in ${docs[*]} exist"

# ---- symbols: every rg_*/RG_*/RETRO_*/test_* name occurs in the code (this script left out).
(cd "$code_root" && { find src include tools tests bench fuzz scripts .ci -type f ! -name check-docs.sh -print0 2>/dev/null
                       find . -maxdepth 1 -name 'CMakeLists.txt' -print0; } |
    xargs -0 grep -ohE '(rg|RG|RETRO|test)_[A-Za-z0-9_]*' 2>/dev/null
  find tests bench fuzz -type f -name 'test_*' | sed 's|.*/||; s|\..*||') | LC_ALL=C sort -u >"$tmp/symbols"
n_syms=$(awk -F'\t' '$3 == "sym"' "$tmp/items" | wc -l)
awk -F'\t' 'FILENAME == ARGV[1] { have[$0] = 1; next }
    $3 == "sym" {
        s = $4
        if (s ~ /\*$/) { p = substr(s, 1, length(s) - 1); ok = 0; for (h in have) if (index(h, p) == 1) { ok = 1; break } }
        else ok = (s in have)
        if (!ok) printf "FAIL %s:%s: symbol `%s` occurs nowhere in the code\n", $1, $2, s
    }' "$tmp/symbols" "$tmp/items" >"$tmp/sym_fail"
n_bad=$(wc -l <"$tmp/sym_fail")
cat "$tmp/sym_fail"; failed=$((failed + n_bad))
[ "$n_bad" = 0 ] && pass "symbols: the $n_syms rg_/RG_/RETRO_/test_ names in ${docs[*]} occur in the code"

# ---- commands: each command line's options appear in `retrograd CMD --help`.
# help_options CMD: writes $tmp/help.CMD (the options, one a line) or returns 1 with the reason in $tmp/why.CMD.
help_options() {
    local cmd=$1 out rc
    if [ ! -x "$bin" ]; then echo "$bin not found (build it: RG_BUILD_TARGETS=retrograd bash scripts/build.sh)" >"$tmp/why.$cmd"; return 1; fi
    out=$("$bin" "$cmd" --help 2>&1); rc=$?
    if [ "$rc" != 0 ] || ! head -1 <<<"$out" | grep -qE "^usage: retrograd $cmd( |$)"; then
        echo "\`retrograd $cmd --help\` (exit $rc) does not begin with 'usage: retrograd $cmd': first line '$(head -1 <<<"$out")'" >"$tmp/why.$cmd"
        return 1
    fi
    # options from the usage block (up to the first blank line) and from the option lines
    awk 'NR == 1 || (u && NF) { u = 1; line = $0
             while (match(line, /(^|[[:space:]\[(|])--?[A-Za-z][-A-Za-z0-9]*/)) {
                 o = substr(line, RSTART, RLENGTH); sub(/^[^-]+/, "", o); print o; line = substr(line, RSTART + RLENGTH) }
             next }
         { u = 0 }
         /^  -/ { for (i = 1; i <= NF; i++) { o = $i; sub(/,$/, "", o); sub(/=.*$/, "", o); if (o ~ /^--?[A-Za-z]/) print o; if ($i !~ /,$/) break } }
         /^  [a-z_]+\.[a-z0-9_]+ / { print $1 }' <<<"$out" >"$tmp/help.$cmd"
    printf -- '-h\n--help\n' >>"$tmp/help.$cmd"
}
n_bad=0 n_lines=0
declare -A checked=()
while IFS=$'\t' read -r doc line _ cmd rest; do
    n_lines=$((n_lines + 1))
    if [ -z "${checked[$cmd]+x}" ]; then
        if help_options "$cmd"; then checked[$cmd]=ok; else checked[$cmd]=bad; fi
        if [ "${checked[$cmd]}" = bad ]; then
            fail "$doc:$line: command \`retrograd $cmd\`: $(cat "$tmp/why.$cmd"): its options cannot be checked"
            n_bad=$((n_bad + 1))
        fi
    fi
    [ "${checked[$cmd]}" = ok ] || continue
    for w in $rest; do
        o=${w#"${w%%[!\[(|]*}"}; o=${o%%=*}; o=${o%"${o##*[!\])|.,]}"}
        [[ "$o" =~ ^--?[A-Za-z][-A-Za-z0-9]*$ ]] || continue
        grep -qxF -- "$o" "$tmp/help.$cmd" && continue
        fail "$doc:$line: \`retrograd $cmd\` has no option $o (not in \`retrograd $cmd --help\`)"
        n_bad=$((n_bad + 1))
    done
done < <(awk -F'\t' '$3 == "cmd"' "$tmp/items")
# training keys against train --help's key list
n_keys=0
while IFS=$'\t' read -r doc line _ key; do
    n_keys=$((n_keys + 1))
    if [ -z "${checked[train]+x}" ]; then
        if help_options train; then checked[train]=ok; else checked[train]=bad; fi
    fi
    if [ "${checked[train]}" != ok ]; then
        fail "$doc:$line: training key \`$key\` cannot be checked: $(cat "$tmp/why.train")"
        n_bad=$((n_bad + 1)); break
    fi
    grep -qxF -- "$key" "$tmp/help.train" && continue
    fail "$doc:$line: training key \`$key\` is not listed by \`retrograd train --help\`"
    n_bad=$((n_bad + 1))
done < <(awk -F'\t' '$3 == "key"' "$tmp/items")
[ "$n_bad" = 0 ] && pass "commands: the $n_lines retrograd command lines of the code blocks use only options their --help lists, and the $n_keys training keys named are train --help's"

# ---- the checker itself: one planted fault of each kind must be reported.
if [ -z "${RG_DOCS_ROOT:-}" ] && [ "${RG_DOCS_NO_SELFTEST:-0}" != 1 ]; then
    st=$tmp/selftest
    mkdir -p "$st"
    for p in src tools tests scripts bench include fuzz data; do [ -e "$p" ] && ln -s "$code_root/$p" "$st/$p"; done
    cp -r docs "$st/docs"; cp README.md "$st/README.md"
    victim=$(head -1 "$tmp/src_files")
    # drop the line that lists the first file (or its full path)
    # ... and list a file that does not exist under the src/cuda/ heading
    awk -v b="\`$(basename "$victim")\`" -v p="\`$victim\`" 'index($0, p) || (/^- `/ && index($0, b) == 3) { next } { print }
        /^#.*`src\/cuda\/`/ { print ""; print "- `no_such_table.cu` — a file that is not there" }' \
        docs/ARCHITECTURE.md >"$st/docs/ARCHITECTURE.md"
    bogus_sym="rg_""no_such_symbol"
    # shellcheck disable=SC2016  # the backticks are markdown, not expansions
    printf '\nPlanted: `src/graph/no_such_file.c`, `%s`, `training.no_such_key`.\n\n```sh\nretrograd train --no-such-option 1\n```\n' \
        "$bogus_sym" >>"$st/README.md"
    RG_DOCS_ROOT=$st bash "$0" "$build" >"$st/out" 2>&1
    expect() {
        if grep -qE -- "$2" "$st/out"; then pass "self-test: $1"
        else fail "self-test: $1 was not reported (wanted /$2/); the checker printed:"; sed 's/^/        /' "$st/out"; fi
    }
    expect "a file under src/ without its line in ARCHITECTURE.md" "^FAIL docs/ARCHITECTURE.md:[0-9]*:? ?$victim is not named"
    expect "a file ARCHITECTURE.md lists that does not exist" "^FAIL docs/ARCHITECTURE.md:[0-9]+: .no_such_table.cu. is listed under .src/cuda/. but src/cuda/no_such_table.cu does not exist"
    expect "a path that does not exist" "^FAIL README.md:[0-9]+: path .src/graph/no_such_file.c. does not exist"
    expect "a symbol that is nowhere in the code" "^FAIL README.md:[0-9]+: symbol .$bogus_sym. occurs nowhere"
    if [ -x "$bin" ] && "$bin" train --help >/dev/null 2>&1; then
        expect "an option the command's --help does not list" "^FAIL README.md:[0-9]+: .retrograd train. has no option --no-such-option"
        expect "a training key train --help does not list" "^FAIL README.md:[0-9]+: training key .training.no_such_key. is not listed"
    else
        expect "a command whose --help cannot be read" "^FAIL README.md:[0-9]+: command .retrograd train."
    fi
fi

echo "$passed passed, $failed failed"
exit $((failed > 0))
