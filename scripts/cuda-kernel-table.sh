#!/usr/bin/env bash
# cuda-kernel-table.sh - what nvcc makes of every kernel in src/cuda/*.cu, as a table the host
# execution (src/cuda_host/kernel_limits.cpp) checks each launch against: registers, static
# shared memory, spills, stack, __launch_bounds__ and the most threads a block may have.
#
#   scripts/cuda-kernel-table.sh generate [ARCHS]  compile for each architecture (default "90 89")
#                                                  and write src/cuda_host/kernel_table.inc
#   scripts/cuda-kernel-table.sh check [ARCHS]     regenerate into a temporary file and diff it
#                                                  against the checked-in table: exit 1 when stale,
#                                                  77 (skip) without nvcc
#   scripts/cuda-kernel-table.sh print             the checked-in table for people, with each
#                                                  kernel's occupancy (no nvcc needed)
#
# Each .cu is compiled as the build compiles it (-O3 -DNDEBUG, the include folders, and
# RG_NVCC_DEVICE_FLAGS from src/cuda/nvcc_flags.cmake) with -Xptxas -v for the registers, shared
# memory, spills and stack, and -keep for the PTX, whose .maxntid / .minnctapersm are the
# kernel's __launch_bounds__. NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
# picks the compiler.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
table="$root/src/cuda_host/kernel_table.inc"
default_archs="90 89"

find_nvcc() {
    if [[ -n "${NVCC:-}" ]]; then echo "$NVCC"; return; fi
    if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return; fi
    if [[ -x /usr/local/cuda/bin/nvcc ]]; then echo /usr/local/cuda/bin/nvcc; return; fi
    echo ""
}

# RG_NVCC_DEVICE_FLAGS of src/cuda/nvcc_flags.cmake, as words: the set(...) may span lines and
# quote its value; a CMake list separates its items with ';'.
device_flags() {
    awk '
        /set\(RG_NVCC_DEVICE_FLAGS/ { on = 1 }
        on { buf = buf " " $0; if ($0 ~ /\)/) { on = 0 } }
        END {
            sub(/.*set\(RG_NVCC_DEVICE_FLAGS/, "", buf); sub(/\).*/, "", buf)
            gsub(/"/, "", buf); gsub(/;/, " ", buf); gsub(/[ \t]+/, " ", buf)
            sub(/^ /, "", buf); sub(/ $/, "", buf); print buf
        }' "$root/src/cuda/nvcc_flags.cmake"
}

# The most threads per block that a kernel of R registers per thread can have on sm_80..sm_90:
# registers are allocated per warp, R * 32 rounded up to the allocation unit of 256 registers
# (i.e. R rounded up to a multiple of 8), and a block has at most 64K registers, so
#   max threads = min(1024, floor(65536 / (ceil(R * 32 / 256) * 256)) * 32)
# 96 registers: 3072 per warp, 21 warps, 672 threads; 128 registers: 512 threads.
# (awk function, shared by generate and print)
awk_lib='
function regs_threads(r,    per_warp, warps) {
    if (r < 1) r = 1
    per_warp = int((r * 32 + 255) / 256) * 256
    warps = int(65536 / per_warp)
    return warps * 32 > 1024 ? 1024 : warps * 32
}
# nvcc names the anonymous namespace of a .cu file _GLOBAL__N__<hash>_<len><file>_<hash>, the host
# compiler _GLOBAL__N_1: the table keeps the host spelling, so one key serves both.
function normalize(s,    d, n, out) {
    out = ""
    while (match(s, /[0-9]+_GLOBAL__N__/)) {
        d = substr(s, RSTART, RLENGTH - length("_GLOBAL__N__"))
        n = d + 0
        out = out substr(s, 1, RSTART - 1) "12_GLOBAL__N_1"
        s = substr(s, RSTART + length(d) + n)
    }
    return out s
}
'

compile_one() {  # compile_one NVCC ARCH CU OUTDIR -> OUTDIR/ptxas.txt, OUTDIR/*.ptx
    local nvcc="$1" arch="$2" cu="$3" out="$4"
    mkdir -p "$out"
    # shellcheck disable=SC2086
    if ! "$nvcc" -O3 -DNDEBUG -DRG_HAVE_CUDA=1 -D_DEFAULT_SOURCE -I"$root/include" -I"$root/src" \
        $(device_flags) "--generate-code=arch=compute_$arch,code=[sm_$arch]" \
        -Xptxas -v -keep -keep-dir "$out" -c "$cu" -o "$out/obj.o" 2>"$out/ptxas.txt"; then
        cat "$out/ptxas.txt" >&2
        echo "cuda-kernel-table: nvcc failed on $cu for sm_$arch" >&2
        exit 1
    fi
}

# Rows "arch|file|mangled|regs|smem|spill_st|spill_ld|stack|maxntid|minncta|max_threads" of one
# compile, from ptxas's report and the PTX.
rows_of() {  # rows_of ARCH FILE OUTDIR
    local arch="$1" file="$2" out="$3"
    awk -v arch="$arch" -v file="$file" "$awk_lib"'
        FNR == 1 { part++ }
        part == 1 && /\.entry / {   # the PTX: .entry NAME( ... ) then .maxntid / .minnctapersm, then {
            name = $0; sub(/.*\.entry[ \t]+/, "", name); sub(/\(.*/, "", name); cur = name
            maxntid[cur] = 0; minncta[cur] = 0; next
        }
        part == 1 && cur != "" && /^\.maxntid/ {
            v = $0; sub(/^\.maxntid[ \t]+/, "", v); n = split(v, d, /[ \t,]+/)
            t = 1; for (i = 1; i <= n; i++) if (d[i] != "") t *= d[i]
            maxntid[cur] = t; next
        }
        part == 1 && cur != "" && /^\.minnctapersm/ { v = $0; sub(/^\.minnctapersm[ \t]+/, "", v); minncta[cur] = v + 0; next }
        part == 1 && /^\{/ { cur = ""; next }
        part == 2 && /Compiling entry function/ {
            e = $0; sub(/.*Compiling entry function \047/, "", e); sub(/\047.*/, "", e)
            order[++ne] = e; regs[e] = 0; smem[e] = 0; st[e] = 0; sl[e] = 0; stack[e] = 0; want = e; next
        }
        part == 2 && /Function properties for/ { p = $0; sub(/.*Function properties for /, "", p); props = p; next }
        part == 2 && /bytes stack frame/ && props in regs {
            stack[props] = $1 + 0; st[props] = $5 + 0; sl[props] = $9 + 0; next
        }
        part == 2 && /Used [0-9]+ registers/ && want != "" {
            u = $0; sub(/.*Used /, "", u); regs[want] = u + 0
            if (match($0, /[0-9]+ bytes smem/)) smem[want] = substr($0, RSTART, RLENGTH) + 0
            want = ""; next
        }
        END {
            for (i = 1; i <= ne; i++) {
                e = order[i]
                printf "%s|%s|%s|%d|%d|%d|%d|%d|%d|%d|%d\n", arch, file, normalize(e), regs[e], smem[e], st[e], sl[e],
                       stack[e], maxntid[e], minncta[e], regs_threads(regs[e])
            }
        }' "$out"/*.ptx "$out/ptxas.txt"
}

generate_into() {  # generate_into DEST ARCHS...
    local dest="$1"; shift
    local nvcc; nvcc="$(find_nvcc)"
    [[ -n "$nvcc" ]] || { echo "cuda-kernel-table: nvcc not found (set NVCC)" >&2; exit 77; }
    local tmp; tmp="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    local arch cu base
    for arch in "$@"; do
        for cu in "$root"/src/cuda/*.cu; do
            base="$(basename "$cu")"
            compile_one "$nvcc" "$arch" "$cu" "$tmp/$arch/${base%.cu}"
            rows_of "$arch" "$base" "$tmp/$arch/${base%.cu}" >>"$tmp/rows"
        done
    done
    LC_ALL=C sort -t'|' -k1,1nr -k2,2 -k3,3 -u "$tmp/rows" >"$tmp/sorted"
    cut -d'|' -f3 "$tmp/sorted" | c++filt >"$tmp/demangled"
    local release; release="$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    local sms; sms="$(printf 'sm_%s ' "$@")"
    local flags; flags="$(device_flags)"
    {
        echo "// kernel_table.inc - generated by scripts/cuda-kernel-table.sh, do not edit."
        echo "// What nvcc $release makes of every kernel of src/cuda/*.cu for ${sms% }, compiled with -O3 -DNDEBUG"
        echo "// and RG_NVCC_DEVICE_FLAGS (${flags:-none}): the host execution refuses a launch that a device of"
        echo "// one of these architectures would refuse (src/cuda_host/kernel_limits.cpp)."
        echo "// Names are nvcc's, the anonymous namespace spelt as the host compiler does (_GLOBAL__N_1)."
        echo "// max_threads: the most threads per block the registers allow, with registers allocated per warp"
        echo "// in units of 256 and 64K registers per block (sm_80..sm_90):"
        echo "//   min(1024, floor(65536 / (ceil(regs * 32 / 256) * 256)) * 32)"
        echo "// launch_bounds: __launch_bounds__'s max threads (PTX .maxntid), 0 when none; min_blocks its"
        echo "// .minnctapersm."
        awk -F'|' '$6 > 0 || $7 > 0 || $8 > 0 { printf "// spills or stack: sm_%s %s: %s bytes stored, %s loaded, %s bytes of stack\n", $1, $3, $6, $7, $8; s = 1 }
                   END { if (!s) print "// spills: none (no kernel spills registers or uses a stack frame)" }' "$tmp/sorted"
        echo "// RGH_KERNEL_ROW(arch, file, mangled, demangled, regs, static_smem, spill_stores, spill_loads, stack,"
        echo "//                launch_bounds, min_blocks, max_threads)"
        paste -d'|' "$tmp/sorted" "$tmp/demangled" | awk -F'|' '{
            printf "RGH_KERNEL_ROW(%s, \"%s\", \"%s\",\n               \"%s\",\n               %s, %s, %s, %s, %s, %s, %s, %s)\n",
                   $1, $2, $3, $12, $4, $5, $6, $7, $8, $9, $10, $11 }'
    } >"$dest"
    rm -rf "$tmp"
    trap - EXIT
}

print_table() {
    # Per architecture: threads per SM, blocks per SM, shared memory per SM (KiB), from NVIDIA's
    # table of compute capabilities; 64K registers per SM on all of them, 1 KiB of shared memory
    # reserved per block. The typical block: the kernel's launch bounds, else 256 threads, never
    # more than its registers allow.
    awk "$awk_lib"'
        BEGIN {
            tps[90] = 2048; bps[90] = 32; smem[90] = 228
            tps[80] = 2048; bps[80] = 32; smem[80] = 164
            tps[89] = 1536; bps[89] = 24; smem[89] = 100
            tps[86] = 1536; bps[86] = 16; smem[86] = 100
            printf "%-5s %4s %6s %6s %6s %6s %7s %9s  %s\n", "arch", "regs", "smem", "spill", "bounds", "max", "block", "occupancy", "kernel"
        }
        /^RGH_KERNEL_ROW\(/ {
            line = $0; getline dem; getline nums
            sub(/^RGH_KERNEL_ROW\(/, "", line); split(line, h, /, /); arch = h[1] + 0
            gsub(/^[ \t]+"|",?$/, "", dem)
            gsub(/[ \t)]/, "", nums); split(nums, v, /,/)
            regs = v[1]; ss = v[2]; spill = v[3] + v[4]; lb = v[6]; maxt = v[8]
            block = lb > 0 ? lb : 256; if (block > maxt) block = maxt
            warps = int((block + 31) / 32)
            nb = bps[arch]
            by_threads = int(tps[arch] / (warps * 32)); if (by_threads < nb) nb = by_threads
            by_regs = int(65536 / (int((regs * 32 + 255) / 256) * 256 * warps)); if (by_regs < nb) nb = by_regs
            by_smem = int(smem[arch] * 1024 / (ss + 1024)); if (by_smem < nb) nb = by_smem
            occ = nb * warps * 32 / tps[arch]
            printf "sm_%-2d %4d %6d %6d %6d %6d %7d %8.0f%%  %s\n", arch, regs, ss, spill, lb, maxt, block, occ * 100, dem
        }' "$table"
}

cmd="${1:-}"
shift || true
case "$cmd" in
generate)
    # shellcheck disable=SC2086
    generate_into "$table" ${1:-$default_archs}
    echo "cuda-kernel-table: wrote $(grep -c '^RGH_KERNEL_ROW' "$table") rows to src/cuda_host/kernel_table.inc"
    ;;
check)
    if [[ -z "$(find_nvcc)" ]]; then
        echo "cuda-kernel-table: nvcc not found: cannot check the kernel table (skip)"
        exit 77
    fi
    archs="${1:-$(sed -n 's/^RGH_KERNEL_ROW(\([0-9]*\),.*/\1/p' "$table" | sort -nru | tr '\n' ' ')}"
    fresh="$(mktemp)"
    # shellcheck disable=SC2086
    generate_into "$fresh" ${archs:-$default_archs}
    if ! diff -u "$table" "$fresh"; then
        rm -f "$fresh"
        echo "the kernel table is stale: run scripts/cuda-kernel-table.sh generate" >&2
        exit 1
    fi
    rm -f "$fresh"
    echo "cuda-kernel-table: src/cuda_host/kernel_table.inc is current"
    ;;
print)
    print_table
    ;;
*)
    echo "usage: scripts/cuda-kernel-table.sh generate [ARCHS] | check [ARCHS] | print" >&2
    exit 2
    ;;
esac
