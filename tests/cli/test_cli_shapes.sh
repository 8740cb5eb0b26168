#!/usr/bin/env bash
# test_cli_shapes.sh BUILD_DIR - make-tiny's large shapes (random weights with a real model's
# dimensions, for the benchmarks and the GPU check):
#   - the SmolLM2-135M shape in BF16: `info` shows its dimensions, tied head and padded
#     vocabulary, the tokenizer gives the tiny model's ids, and it generates 2 tokens on the CPU;
#   - the Llama-3.2-1B shape's header and tensor table through --dry-run (the real file is 2.5 GB;
#     test_gguf checks that a streamed shape holds the bytes of the one built in memory);
#   - the hybrid shapes: LFM2-350M through --dry-run (its attention layers at 2, 5, 8, 10, 12, 14,
#     354.48 M parameters as published), mamba2-130m written and read back by info (128.99 M);
#     a shape made for another architecture is refused.
set -u
bin="$1/retrograd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

# expect_lines NAME LISTING PATTERN...: every extended regex matches a line of the listing.
expect_lines() {
  local name="$1" listing="$2"; shift 2
  local miss=""
  for p in "$@"; do grep -Eq -- "$p" <<<"$listing" || miss="$miss /$p/"; done
  check "$name" "$([ -z "$miss" ] && echo 0 || echo 1)" "lacks$miss"
}

expect "make-tiny --shape smollm2 bf16" 0 "wrote .*smollm2 shape llama bf16" -- \
  "$bin" make-tiny --arch llama --shape smollm2 --type bf16 -o "$tmp/smol.gguf"
info=$("$bin" info "$tmp/smol.gguf" 2>&1)
expect_lines "info shows the SmolLM2-135M shape" "$info" \
  "block_count +30$" "embedding_length +576$" "feed_forward_length +1536$" "attention.head_count +9$" \
  "attention.head_count_kv +3$" "vocab_size +49152$" "context_length +8192$" "^  tokens +49152$" \
  "^parameters +134515008 " "blk.29.ffn_down.weight +bf16 +\[1536, 576\]" "token_embd.weight +bf16 +\[576, 49152\]" \
  "name .*smollm2-shape llama bf16 tied"
grep -Eq "^  output\.weight " <<<"$info"; check "the smollm2 shape is tied (no output.weight)" "$([ $? = 1 ] && echo 0 || echo 1)"

"$bin" make-tiny --arch llama --type f32 -o "$tmp/tiny.gguf" >/dev/null
text="What is 1 plus 2? <|im_end|>"
a=$("$bin" tokenize -m "$tmp/tiny.gguf" -p "$text" --ids 2>&1); b=$("$bin" tokenize -m "$tmp/smol.gguf" -p "$text" --ids 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ]; check "the padded vocabulary tokenizes as the tiny one" $? "$a vs $b"
expect "generate 2 tokens on the smollm2 shape (cpu)" 0 "generation: 2 tokens" -- \
  "$bin" generate -m "$tmp/smol.gguf" -p "What is 1 plus 2?" -n 2 -c 64 -t 2 --raw

listing=$("$bin" make-tiny --arch llama --shape 1b --type bf16 -o "$tmp/1b.gguf" --dry-run 2>&1)
expect_lines "--dry-run lists the Llama-3.2-1B shape" "$listing" \
  "not written: --dry-run" "block_count +16$" "embedding_length +2048$" "feed_forward_length +8192$" \
  "attention.head_count +32$" "attention.head_count_kv +8$" "vocab_size +128256$" "context_length +2048$" \
  "rope.dimension_count +64$" "^parameters +1235814400 " "^tensors: 146$" "token_embd.weight +bf16 +\[2048, 128256\] +525336576$" \
  "blk.15.attn_k.weight +bf16 +\[2048, 512\]" "blk.15.ffn_gate.weight +bf16 +\[2048, 8192\]"
[ ! -e "$tmp/1b.gguf" ]; check "--dry-run writes nothing" $?
listing=$("$bin" make-tiny --arch lfm2 --shape lfm2-350m --type bf16 -o "$tmp/lfm2.gguf" --dry-run 2>&1)
expect_lines "--dry-run lists the LFM2-350M shape" "$listing" \
  "^parameters +354483968 " "^architecture +lfm2$" "blk\.0\.shortconv\.in_proj\.weight +bf16 +\[1024, 3072\]" \
  "blk\.0\.shortconv\.conv\.weight +f32 +\[3, 1024\]" "blk\.2\.attn_q\.weight +bf16 +\[1024, 1024\]" \
  "blk\.14\.attn_k_norm\.weight" "blk\.15\.shortconv\.out_proj\.weight" "blk\.15\.ffn_gate\.weight +bf16 +\[1024, 4608\]"
grep -Eq "blk\.(0|1|3|4|6|7|9|11|13|15)\.attn_q\.weight|blk\.(2|5|8|10|12|14)\.shortconv" <<<"$listing"
check "the LFM2-350M shape has attention exactly at layers 2, 5, 8, 10, 12 and 14" "$([ $? = 1 ] && echo 0 || echo 1)"
expect "make-tiny --shape mamba2-130m bf16" 0 "wrote .*mamba2-130m shape mamba2 bf16" -- \
  "$bin" make-tiny --arch mamba2 --shape mamba2-130m --type bf16 -o "$tmp/mamba2.gguf"
info=$("$bin" info "$tmp/mamba2.gguf" 2>&1)
expect_lines "info shows the mamba2-130m shape" "$info" \
  "^parameters +128989632 " "block_count +24$" "embedding_length +768$" "ssm.inner_size +1536$" "ssm.state_size +128$" \
  "ssm.conv_kernel +4$" "ssm.group_count +1$" "tokens +50288$"
expect "a hybrid shape for another architecture is refused" 1 "shape 'lfm2-350m' \(LFM2-350M\) is for --arch lfm2, not llama" -- \
  "$bin" make-tiny --arch llama --shape lfm2-350m --type bf16 -o "$tmp/x.gguf" --dry-run
expect "make-tiny unknown shape" 1 "--shape '7b' is not one of: tiny smollm2 1b" -- \
  "$bin" make-tiny --arch llama --shape 7b --type bf16 -o "$tmp/x.gguf"
expect "--dry-run of a quantized type refused" 1 "--dry-run lists f32, f16 and bf16" -- \
  "$bin" make-tiny --arch llama --shape 1b --type q4_0 -o "$tmp/x.gguf" --dry-run
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
