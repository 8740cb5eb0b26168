#!/usr/bin/env bash
# check-fma.sh - the FMA audit of the CUDA code (issue 22): no kernel may contain a fused
# multiply-add that its source does not write, so the host execution of the same source
# (-ffp-contract=off; fmaf and __fmaf_rn fused) rounds as the GPU build does.
#
#   bash scripts/check-fma.sh [FILE.cu...]   # default src/cuda/*.cu; ends with "N passed, N failed, N skipped"
#
# Each src/cuda/*.cu is compiled to PTX for sm_90 with the build's flags (RG_NVCC_DEVICE_FLAGS
# of src/cuda/nvcc_flags.cmake) and checked:
#   flags     the flags hold --fmad=false (without it nvcc contracts a*b+c at will);
#   PTX       no floating-point add/sub/mul without a rounding modifier: with --fmad=false
#             nvcc writes mul.rn/add.rn/sub.rn. The PTX ISA: an add or mul "with an explicit
#             rounding modifier is treated conservatively by the code optimizer"; only those
#             with none "may be optimized to use fused-multiply-add instructions". So the only
#             fused operations left are the PTX's fma.rn, and those come from fmaf/__fmaf_rn
#             in our source or the CUDA math library's own (expf, tanhf, ...: explicit there).
# Printed per kernel (informational): PTX fma with the build's flags against --fmad=true and,
# where nvdisasm is found (NVDISASM=, PATH, the toolkit, or `pip install nvidia-cuda-nvdisasm`
# into a cache when RG_FMA_PIP=1), FFMA in the sm_90 SASS both ways (ptxas unrolls loops and
# expands division, square root and integer division with FFMA, so those counts are above
# the PTX's; the pair shows what contraction would add).
# The detector itself is tested first on a probe kernel (a*b+c and a lone a*b): under
# --fmad=true nvcc fuses the first into fma.rn and leaves the second a plain mul.f32 (which the
# detector must flag); with the build's flags neither an fma nor a flagged operation.
# Without nvcc every check is a skip, not a pass.
#
# RG_FMA_FLAGS overrides the build's flags (the self-test: RG_FMA_FLAGS= must fail).
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0 failed=0 skipped=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
summary() { echo "$passed passed, $failed failed, $skipped skipped"; exit $((failed > 0)); }

NVCC=${NVCC:-$(command -v nvcc || true)}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
cus=("$@")
[ ${#cus[@]} = 0 ] && cus=(src/cuda/*.cu)
if [ -z "$NVCC" ] || ! [ -x "$NVCC" ]; then
    echo "SKIP: nvcc not found (NVCC=, PATH, /usr/local/cuda/bin): the FMA audit needs the CUDA compiler"
    skipped=$((2 + ${#cus[@]}))  # the flags, the detector, each file
    summary
fi

# The build's flags, read by cmake itself from the one file that sets them.
if [ -n "${RG_FMA_FLAGS+x}" ]; then
    flags=$RG_FMA_FLAGS
    echo "flags from RG_FMA_FLAGS: '$flags'"
else
    probe=$(mktemp --suffix=.cmake)
    printf 'include(src/cuda/nvcc_flags.cmake)\nmessage("${RG_NVCC_DEVICE_FLAGS}")\n' >"$probe"
    flags=$(cmake -P "$probe" 2>&1 | tr ';' ' ')
    rm -f "$probe"
    echo "flags from src/cuda/nvcc_flags.cmake: '$flags'"
fi
# shellcheck disable=SC2206
flag_list=($flags)
if [[ " $flags " =~ [[:space:]]-?-fmad(=|[[:space:]]+)false[[:space:]] ]]; then
    pass "flags: --fmad=false is in RG_NVCC_DEVICE_FLAGS"
else
    fail "flags: RG_NVCC_DEVICE_FLAGS lacks --fmad=false: nvcc contracts a*b+c into FFMA that the host execution does not make"
fi

# nvdisasm for the SASS counts: optional.
NVDISASM=${NVDISASM:-$(command -v nvdisasm || true)}
[ -z "$NVDISASM" ] && [ -x "$(dirname "$NVCC")/nvdisasm" ] && NVDISASM="$(dirname "$NVCC")/nvdisasm"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/retrograd/nvdisasm
[ -z "$NVDISASM" ] && [ -x "$cache/bin/nvdisasm" ] && NVDISASM="$cache/bin/nvdisasm"
if [ -z "$NVDISASM" ] && [ "${RG_FMA_PIP:-0}" = 1 ]; then
    python3 -m pip install -q --target "$cache/py" nvidia-cuda-nvdisasm >/dev/null 2>&1
    found=$(find "$cache/py" -name nvdisasm -type f 2>/dev/null | head -1)
    [ -n "$found" ] && mkdir -p "$cache/bin" && ln -sf "$found" "$cache/bin/nvdisasm" && NVDISASM="$cache/bin/nvdisasm"
fi
[ -n "$NVDISASM" ] && echo "nvdisasm: $NVDISASM" || echo "nvdisasm not found: SASS counts left out (RG_FMA_PIP=1 installs it from PyPI)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The flags without any --fmad, then --fmad=true: what nvcc's default would make.
contract=()
for f in "${flag_list[@]}"; do [[ "$f" =~ ^-?-fmad ]] || contract+=("$f"); done
contract+=(--fmad=true)
common=(-arch=sm_90 -std=c++17 -Iinclude -Isrc -DRG_HAVE_CUDA=1)
# A float add/sub/mul with no rounding modifier: ptxas may contract it into an fma.
CONTRACTABLE='^[[:space:]]+(@!?%p[0-9]+[[:space:]]+)?(add|sub|mul)(\.(ftz|sat))*\.(f16|f16x2|bf16|bf16x2|f32|f64)[[:space:]]'

# ptx_counts FILE: "function fma" per .entry/.func (demangled), fma of any float type.
ptx_counts() {
    awk '/^(\.visible |\.weak |\.extern )*\.(entry|func)/ { for (i = 1; i <= NF; i++) if ($i ~ /^[_A-Za-z$][_A-Za-z0-9$]*\(?$/ && $i !~ /^\./) name = $i
                                                         sub(/\($/, "", name); n[name] += 0 }
         /^[[:space:]]+(@!?%p[0-9]+[[:space:]]+)?fma\.[a-z.0-9]*(f16|bf16|f32|f64)/ { n[name]++ }
         END { for (k in n) print k, n[k] }' "$1"
}
# sass_counts FILE.cubin: "function FFMA" per .text section (DFMA and HFMA2 counted too).
sass_counts() {
    "$NVDISASM" -c "$1" 2>/dev/null | awk '/^[[:space:]]*\.text\./ { name = $1; sub(/^\.text\./, "", name); sub(/:$/, "", name); n[name] += 0 }
        /[[:space:]](FFMA|DFMA|HFMA2|HFMA2\.MMA)[[:space:].]/ { n[name]++ } END { for (k in n) print k, n[k] }'
}

# compile CU MODE FLAGS...: the sm_90 cubin, its PTX kept beside it ($tmp/MODE/BASE.ptx).
compile() {
    local cu=$1 mode=$2; shift 2
    mkdir -p "$tmp/$mode"
    "$NVCC" "${common[@]}" "$@" -cubin -keep -keep-dir "$tmp/$mode" "$cu" -o "$tmp/$mode/$(basename "$cu" .cu).cubin" \
        2>"$tmp/$mode/err"
}
# The probe: the detector must see what --fmad=true allows, and nothing with the flags.
printf '__global__ void probe(float *y, const float *a, const float *b) { y[0] = a[0] * b[0] + y[1]; y[2] = a[1] * b[1]; }\n' \
    >"$tmp/fma_probe.cu"
FMA='^[[:space:]]+(@!?%p[0-9]+[[:space:]]+)?fma\.'
if compile "$tmp/fma_probe.cu" probe_c "${contract[@]}" && compile "$tmp/fma_probe.cu" probe_f "${flag_list[@]}"; then
    cc=$(grep -cE "$CONTRACTABLE" "$tmp/probe_c/fma_probe.ptx"); cf=$(grep -cE "$FMA" "$tmp/probe_c/fma_probe.ptx")
    fc=$(grep -cE "$CONTRACTABLE" "$tmp/probe_f/fma_probe.ptx"); ff=$(grep -cE "$FMA" "$tmp/probe_f/fma_probe.ptx")
    if [ "$cc" -gt 0 ] && [ "$cf" -gt 0 ] && [ "$fc" = 0 ] && [ "$ff" = 0 ]; then
        pass "detector: the probe under --fmad=true has $cf fused and $cc contractable operations, with the flags none"
    else
        fail "detector: the probe under --fmad=true has $cf fused (want > 0) and $cc contractable (want > 0) operations, with the flags $ff and $fc (want 0 and 0)"
    fi
else
    fail "detector: nvcc failed on the probe kernel: $(head -3 "$tmp/probe_c/err" "$tmp/probe_f/err" 2>/dev/null)"
fi

for cu in "${cus[@]}"; do
    base=$(basename "$cu" .cu)
    if ! compile "$cu" f "${flag_list[@]}"; then
        fail "$cu: nvcc failed: $(head -3 "$tmp/f/err")"
        continue
    fi
    cp "$tmp/f/$base.ptx" "$tmp/$base.ptx"
    # A float add/sub/mul with no rounding modifier may be contracted by ptxas.
    bad=$(grep -nE "$CONTRACTABLE" "$tmp/$base.ptx" | head -5)
    nbad=$(grep -cE "$CONTRACTABLE" "$tmp/$base.ptx")
    if [ "$nbad" = 0 ]; then
        pass "$cu: every float add/sub/mul of its PTX has a rounding modifier (no contraction possible)"
    else
        fail "$cu: $nbad contractable float add/sub/mul in its PTX (ptxas may fuse them into FFMA), e.g.:"
        echo "$bad" | sed 's/^/        /'
    fi
    # The per-kernel table.
    compile "$cu" c "${contract[@]}"
    ptx_counts "$tmp/f/$base.ptx" | sort >"$tmp/$base.pf"
    ptx_counts "$tmp/c/$base.ptx" | sort >"$tmp/$base.pc"
    : >"$tmp/$base.sf"; : >"$tmp/$base.sc"
    if [ -n "$NVDISASM" ]; then
        sass_counts "$tmp/f/$base.cubin" | sort >"$tmp/$base.sf"
        sass_counts "$tmp/c/$base.cubin" | sort >"$tmp/$base.sc"
    fi
    join -a1 -e- -o 0,1.2,2.2 "$tmp/$base.pf" "$tmp/$base.pc" | join -a1 -e- -o 0,1.2,1.3,2.2 - "$tmp/$base.sf" |
        join -a1 -e- -o 0,1.2,1.3,1.4,2.2 - "$tmp/$base.sc" >"$tmp/$base.rows"
    while read -r fn pf pc sf sc; do
        printf '    %-14s %-44.44s PTX fma %5s (fmad=true %5s)  SASS FFMA %5s (fmad=true %5s)\n' \
            "$base" "$(c++filt "$fn" | sed -E 's/\(anonymous namespace\):://g; s/^void //; s/\(.*//')" "$pf" "$pc" "$sf" "$sc"
    done <"$tmp/$base.rows"
done
summary
