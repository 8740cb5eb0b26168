#!/usr/bin/env bash
# test_cli.sh BUILD_DIR - the retrograd command line on good and bad input.
# Every bad input must give one line naming the file and the problem, a
# non-zero exit, and no crash (exit codes >= 128 are signals).
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

"$bin" make-tiny --arch qwen2 --type f16 -o "$tmp/tiny-f16.gguf" >/dev/null
printf 'GGUF' > "$tmp/magic-only.gguf"
head -c 1000 "$tmp/tiny-f16.gguf" > "$tmp/truncated.gguf"
printf 'hello, this is plain text and not a model at all\n' > "$tmp/text.gguf"
: > "$tmp/empty.gguf"
cp "$tmp/tiny-f16.gguf" "$tmp/unreadable.gguf"; chmod 000 "$tmp/unreadable.gguf"
python3 - "$tmp/tiny-f16.gguf" "$tmp/v1.gguf" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[4:8] = (1).to_bytes(4, 'little'); open(sys.argv[2], 'wb').write(b)
PY

expect "info prints the architecture"   0 "architecture +qwen2"        -- "$bin" info "$tmp/tiny-f16.gguf"
expect "info lists the tensor table"    0 "blk.1.ffn_down.weight +f16"  -- "$bin" info "$tmp/tiny-f16.gguf"
expect "info --json is valid JSON"      0 '"n_parameters": 1444096'     -- "$bin" info "$tmp/tiny-f16.gguf" --json
expect "info of a missing file"         1 "nope.gguf: cannot open: No such file" -- "$bin" info "$tmp/nope.gguf"
expect "info of a directory"            1 "is a directory"              -- "$bin" info "$tmp"
expect "info of an empty file"          1 "empty.gguf: not a GGUF file" -- "$bin" info "$tmp/empty.gguf"
expect "info of a text file"            1 "text.gguf: not a GGUF file: offset 0" -- "$bin" info "$tmp/text.gguf"
expect "info of a 4-byte file"          1 "magic-only.gguf: not a GGUF file" -- "$bin" info "$tmp/magic-only.gguf"
expect "info of a truncated file"       1 "truncated.gguf: .*(truncated|cannot fit)" -- "$bin" info "$tmp/truncated.gguf"
expect "info of a version 1 file"       1 "version 1 is not supported"  -- "$bin" info "$tmp/v1.gguf"
if [ "$(id -u)" != 0 ]; then
  expect "info of an unreadable file"   1 "unreadable.gguf: cannot open: Permission denied" -- "$bin" info "$tmp/unreadable.gguf"
fi
expect "info without a file"            1 "usage: retrograd info"       -- "$bin" info
expect "info with an unknown option"    1 "unknown option '--jsn'"      -- "$bin" info "$tmp/tiny-f16.gguf" --jsn
expect "unknown command"                1 "unknown command 'infp'"      -- "$bin" infp
expect "make-tiny unknown arch"         1 "unknown architecture 'gpt9' \\(supported: llama, qwen2, qwen3, lfm2, mamba2, gemma2, gemma3\\)" -- "$bin" make-tiny --arch gpt9 --type f32 -o "$tmp/x.gguf"
for a in llama qwen3; do
  expect "make-tiny --arch $a"          0 "wrote .*\\($a f32"           -- "$bin" make-tiny --arch $a --type f32 -o "$tmp/tiny-$a.gguf"
  expect "info of the tiny $a"          0 "architecture +$a"            -- "$bin" info "$tmp/tiny-$a.gguf"
done
# lfm2 and mamba2: made, read, generated from and scored (the conv and SSM states carried between calls); gemma2
# and gemma3 the same (their sliding windows of 8 crossed by the 32-token chunks).
for i in $(seq 1 20); do echo "Line $i: the quick brown fox jumps over the lazy dog."; done > "$tmp/ppl.txt"
for a in lfm2 mamba2 gemma2 gemma3; do
  expect "make-tiny --arch $a"          0 "wrote .*\\($a f32"           -- "$bin" make-tiny --arch $a --type f32 -o "$tmp/tiny-$a.gguf"
  expect "info of the tiny $a"          0 "architecture +$a"            -- "$bin" info "$tmp/tiny-$a.gguf"
  expect "make-tiny --arch $a q4_k_m"   0 "wrote .*\\($a Q4_K_M"        -- "$bin" make-tiny --arch $a --type q4_k_m -o "$tmp/tiny-$a-q4.gguf"
  expect "generate on $a"               0 "generation: 4 tokens"         -- "$bin" generate -m "$tmp/tiny-$a-q4.gguf" -p hi -n 4 --raw
  expect "perplexity on $a"             0 "Final estimate: PPL = [0-9]"  -- "$bin" perplexity -m "$tmp/tiny-$a.gguf" -f "$tmp/ppl.txt" -c 32
done
expect "make-tiny --groups 2 on mamba2" 0 "wrote .*\\(mamba2 f32"      -- "$bin" make-tiny --arch mamba2 --groups 2 --type f32 -o "$tmp/tiny-g2.gguf"
expect "info: two SSM groups"           0 "blk.0.ssm_norm.weight +f32 +\\[256, 2\\]" -- "$bin" info "$tmp/tiny-g2.gguf"
expect "make-tiny --groups 3 refused"   1 "3 SSM groups do not divide the 8 heads" -- "$bin" make-tiny --arch mamba2 --groups 3 --type f32 -o "$tmp/x.gguf"
expect "make-tiny --groups on lfm2"     1 "SSM groups are mamba2's; lfm2 has none" -- "$bin" make-tiny --arch lfm2 --groups 2 --type f32 -o "$tmp/x.gguf"
expect "make-tiny unknown type"         1 "--type 'q9_9' is not supported" -- "$bin" make-tiny --arch qwen2 --type q9_9 -o "$tmp/x.gguf"
expect "make-tiny bad seed"             1 "--seed 'abc' is not"         -- "$bin" make-tiny --arch qwen2 --type f32 --seed abc -o "$tmp/x.gguf"
expect "make-tiny into a missing dir"   1 "no/dir/x.gguf: cannot create" -- "$bin" make-tiny --arch qwen2 --type f32 -o "$tmp/no/dir/x.gguf"
expect "make-tiny without -o"           1 "-o is required"              -- "$bin" make-tiny --arch qwen2 --type f32
expect "make-tiny bf16 twin"            0 "f32 twin"                    -- "$bin" make-tiny --arch qwen2 --type bf16 --twin-f32 -o "$tmp/twin.gguf"
expect "report names the gpu"           0 "gpu_device"                  -- "$bin" report
expect "report --json --device cpu"     0 '"cap_flash_attn_back": true' -- "$bin" report --json --device cpu
# RETRO_CUDA_HOST=1: the host execution of the CUDA code is the device, and says so (or the build says it has none).
expect "report under RETRO_CUDA_HOST=1" 0 "gpu_device +(host execution of the CUDA code \(not a GPU\)|none \(RETRO_CUDA_HOST=1, but this build has no host execution)" -- env RETRO_CUDA_HOST=1 "$bin" report
expect "report: flash backward on the CUDA device" 0 "cap_flash_attn_back +true \(the CUDA kernels|none \(RETRO_CUDA_HOST=1, but this build has no host execution" -- env RETRO_CUDA_HOST=1 "$bin" report
expect "RETRO_CUDA_HOST=1 names itself" 0 "RETRO_CUDA_HOST=1(: the CUDA device is the host execution|, but this build has no host execution)" -- env RETRO_CUDA_HOST=1 "$bin" report
"$bin" make-tiny --arch qwen2 --type f32 -o "$tmp/tiny-f32.gguf" >/dev/null
expect "quantize Q4_K_M"                0 "q6_K +3 tensors"             -- "$bin" quantize "$tmp/tiny-f32.gguf" "$tmp/q4km.gguf" Q4_K_M --quiet
expect "quantized file reads back"      0 "file type +15 \(MOSTLY_Q4_K_M\)" -- "$bin" info "$tmp/q4km.gguf"
expect "quantize unknown type lists valid ones" 1 "unknown type or mixture 'Q9_K'; valid: F32 F16 BF16 Q4_0" -- "$bin" quantize "$tmp/tiny-f32.gguf" "$tmp/x.gguf" Q9_K
expect "quantize missing input"         1 "nope.gguf: cannot open"      -- "$bin" quantize "$tmp/nope.gguf" "$tmp/x.gguf" Q8_0
expect "quantize bad thread count"      1 "--threads '0' is not valid: give an integer in 1\.\.512" -- "$bin" quantize "$tmp/tiny-f32.gguf" "$tmp/x.gguf" Q8_0 --threads 0
expect "requantize needs a flag"        1 "already q[46]_K: re-quantizing to q8_0 adds q8_0's rounding error .*--allow-requantize" -- "$bin" quantize "$tmp/q4km.gguf" "$tmp/x.gguf" Q8_0
expect "quantized to f16 needs a flag"  1 "already q[46]_K: f16 rounds its dequantized values again .*F32 keeps them exactly" -- "$bin" quantize "$tmp/q4km.gguf" "$tmp/x.gguf" F16
[ ! -e "$tmp/x.gguf" ]; check "a refused quantize writes nothing" $?
expect "quantized to f32 needs no flag" 0 "f32 +27 tensors"             -- "$bin" quantize "$tmp/q4km.gguf" "$tmp/deq.gguf" F32 --quiet
# Dequantizing is exact: every tensor of the F32 file holds what the gguf package dequantizes the quantized one to.
python3 - "$tmp/q4km.gguf" "$tmp/deq.gguf" <<'PY'
import sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
q, d = (GGUFReader(p).tensors for p in sys.argv[1:])
bad = [a.name for a, b in zip(q, d)
       if a.name != b.name or b.tensor_type.name != "F32"
       or not np.array_equal(dequantize(a.data, a.tensor_type).reshape(-1), np.asarray(b.data).reshape(-1))]
print("    dequantized to F32: %d tensors, %d differ from gguf-py's dequantization" % (len(d), len(bad)), bad[:3])
sys.exit(1 if bad or len(q) != len(d) else 0)
PY
check "quantized to f32 keeps every value" $?
expect "requantize with the flag"       0 "q8_0"                        -- "$bin" quantize "$tmp/q4km.gguf" "$tmp/rq.gguf" Q8_0 --allow-requantize --quiet
expect "quantize shows progress"        0 "blk.1.ffn_down.weight +f32 +-> q6_K" -- "$bin" quantize "$tmp/tiny-f32.gguf" "$tmp/q4km2.gguf" Q4_K_M
for t in q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k_m q4_k_s q4_k_m q5_k_m q6_k q3_k q4_k q5_k iq4_nl iq4_xs tq1_0 tq2_0 mxfp4 nvfp4 q1_0 q2_0 f16 bf16; do
  expect "make-tiny --type $t"          0 "wrote .*$t"                  -- "$bin" make-tiny --arch qwen2 --type "$t" -o "$tmp/tiny-$t.gguf"
done
expect "make-tiny q4_k_m twin refused"  1 "applies to f16 and bf16 only" -- "$bin" make-tiny --arch qwen2 --type q4_k_m --twin-f32 -o "$tmp/x.gguf"
[ -e "$tmp/x.gguf" ] && { echo "FAIL failed make-tiny left a file"; failed=$((failed + 1)); }

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
