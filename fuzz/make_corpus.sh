#!/usr/bin/env bash
# fuzz/make_corpus.sh TARGET BUILD_DIR OUTDIR - seed corpus for fuzz/fuzz_TARGET.c.
#
# gguf: writes into OUTDIR
#   - make-tiny fixtures from BUILD_DIR/retrograd (~300 KB each; libFuzzer reads the
#     first -max_len bytes of them, which still hold the whole header and metadata);
#   - small hand-made GGUF files (python3, standard library only): the 256-byte
#     example of spec gguf-and-types.md §1.13 byte for byte (its SHA-256 is checked),
#     every metadata value type, a mix of tensor types and ranks, a custom alignment,
#     version 2, an empty file of no keys and no tensors;
#   - a file from gguf.GGUFWriter when the gguf package is installed;
#   - truncated and corrupted variants that the reader must refuse cleanly.
# serve_request: the committed seeds of fuzz/seeds/serve_request/ as they are (each starts with its control byte).
# agent_tools: the committed tools files of fuzz/seeds/agent_tools/ as they are (the input is the whole file).
# jsonl, config, tokenizer, chat, tool_calls: the committed seeds of fuzz/seeds/TARGET/ (and, for the
# tokenizer, the test strings of tests/data/tokenizer/*.inp; for chat, the templates of
# fuzz/templates/), each behind the control byte(s) its target reads first, several
# choices of them per seed (the targets' headers describe their input layout).
set -euo pipefail

if [ $# -ne 3 ]; then
    echo "usage: $0 TARGET BUILD_DIR OUTDIR" >&2
    exit 2
fi
target=$1
build=$2
out=$3
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"

case $target in
gguf) ;;
serve_request | agent_tools)
    cp "$root"/fuzz/seeds/"$target"/* "$out"/
    echo "make_corpus.sh: $(ls "$out" | wc -l) seeds in $out"
    exit 0
    ;;
jsonl | config | tokenizer | chat | tool_calls)
    python3 - "$target" "$root" "$out" <<'PY'
import glob
import os
import sys

target, root, out = sys.argv[1:]
seeds = sorted(glob.glob(os.path.join(root, "fuzz", "seeds", target, "*")))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


if target == "jsonl":
    # Control byte: bit 0 picks the exact mode (big ctx, one sample per row) or the row
    # mode (two more bytes: ctx, then seed and eval fraction); see fuzz/fuzz_jsonl.c.
    for path in seeds:
        base = os.path.basename(path)
        body = read(path)
        plain = 0x08 if base.endswith(".txt") else 0
        for ctl in (0x00, 0x02, 0x12, 0x14):
            write(f"{base}-exact-{ctl:02x}", bytes([ctl | plain]) + body)
        for ctl, ctx, opt in ((0x11, 7, 0x01), (0x33, 32, 0x16), (0x91, 3, 0x2A), (0x43, 0xF2, 0x03)):
            write(f"{base}-rows-{ctl:02x}", bytes([ctl | plain, ctx, opt]) + body)
elif target == "config":
    # Control byte: bit 0 = 0 YAML text, 1 --set lines.
    for path in seeds:
        base = os.path.basename(path)
        write(base, bytes([1 if base.endswith(".set") else 0]) + read(path))
elif target == "tokenizer":
    # Control byte: vocabulary, encode/decode, special flags (fuzz/fuzz_tokenizer.c).
    texts = [read(p) for p in seeds]
    for inp in sorted(glob.glob(os.path.join(root, "tests", "data", "tokenizer", "*.inp"))):
        texts += read(inp).split(b"\n__ggml_vocab_test__\n")
    texts = sorted(set(t for t in texts if t))
    for i, text in enumerate(texts):
        for v in range(5):
            ctl = v | (0x30 if i % 2 else 0x10 if i % 3 else 0x40)
            write(f"encode-{i:03d}-{v}", bytes([ctl]) + text)
    ids = bytes(range(0, 96))
    for v in range(5):
        write(f"decode-{v}", bytes([v | 0x08]) + ids)
        write(f"decode-special-{v}", bytes([v | 0x58]) + ids)
        write(f"decode-raw-{v}", bytes([v | 0x88]) + bytes([0xFF, 0xFF, 0xFF, 0x7F, 0, 0, 0, 0x80, 3, 0, 0, 0]))
elif target == "tool_calls":
    # Control byte: bit 0 the family (a seed's suffix: .hermes 0, .lfm2 1), bits 1-2 the
    # tool_choice the calls are checked against (fuzz/fuzz_tool_calls.c).
    for path in seeds:
        base = os.path.basename(path)
        family = 1 if base.endswith(".lfm2") else 0
        for choice in range(4):
            write(f"{base}-{choice}", bytes([family | choice << 1]) + read(path))
else:  # chat
    # Control byte: bit 0 = 0 recognize the rest as a template; 1 render with template
    # (ctl >> 1) % N and the messages that follow (fuzz/fuzz_chat.c).
    templates = sorted(glob.glob(os.path.join(root, "fuzz", "templates", "*.jinja")))
    for path in templates:
        base = os.path.basename(path)
        write(f"recognize-{base}", b"\x00" + read(path))
        write(f"recognize-bos-{base}", b"\x02" + read(path))
    # A seed file is messages "ROLE: content" separated by lines "---"; a role becomes its
    # role byte (or 0xF0, the role and 0x1F for a role of its own).
    roles = [b"system", b"user", b"assistant", b"tool", b"ipython", b""]
    for path in seeds:
        base = os.path.basename(path)
        fields = []
        for msg in read(path).split(b"\n---\n"):
            role, _, content = msg.partition(b": ")
            code = bytes([roles.index(role)]) if role in roles else b"\xf0" + role + b"\x1f"
            fields.append(code + content)
        body = b"\x1e".join(fields)
        for t in range(len(templates) + 1):
            write(f"render-{t}-{base}", bytes([1 | t << 1 | (0x20 if t % 2 else 0)]) + body)
        write(f"render-dated-{base}", bytes([1 | 6 << 1 | 0x40]) + b"05 Mar 2031\x1e" + body)
PY
    echo "make_corpus.sh: $(ls "$out" | wc -l) seeds in $out"
    exit 0
    ;;
*)
    echo "make_corpus.sh: unknown target '$target' (gguf, jsonl, config, tokenizer, chat, tool_calls)" >&2
    exit 2
    ;;
esac

if [ -x "$build/retrograd" ]; then
    "$build/retrograd" make-tiny --arch qwen2 --type f16 --seed 1 -o "$out/tiny-qwen2-f16.gguf" >/dev/null
    "$build/retrograd" make-tiny --arch qwen2 --type bf16 --tied --seed 2 -o "$out/tiny-qwen2-bf16-tied.gguf" >/dev/null
    "$build/retrograd" make-tiny --arch qwen2 --type f32 --seed 3 -o "$out/tiny-qwen2-f32.gguf" >/dev/null
else
    echo "make_corpus.sh: $build/retrograd not found; skipping the make-tiny seeds" >&2
fi

python3 - "$out" <<'PY'
import hashlib
import os
import struct
import sys

out = sys.argv[1]
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
       U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STRING:
        return gstr(v)
    return struct.pack(FMT[t], v)


def kv(key, t, v, et=None):
    b = gstr(key) + struct.pack("<I", t)
    if t == ARRAY:
        b += struct.pack("<IQ", et, len(v)) + b"".join(value(et, x) for x in v)
    else:
        b += value(t, v)
    return b


def gguf(kvs, tensors, alignment=32, version=3):
    """kvs: encoded pairs; tensors: (name, type id, ggml dims, raw bytes)."""
    b = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kvs)) + b"".join(kvs)
    off = 0
    for name, tid, dims, raw in tensors:
        b += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        b += struct.pack("<IQ", tid, off)
        off += -(-len(raw) // alignment) * alignment
    if tensors:
        b += bytes(-len(b) % alignment)
        for _, _, _, raw in tensors:
            b += raw + bytes(-len(raw) % alignment)
    return b


def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


# 1. The spec's 256-byte example (§1.13): three keys, one Q4_0 tensor [32, 2].
q4_block = bytes.fromhex("d8a78956720ebb28f8fcf3a0653992e3383e")
zero_block = bytes.fromhex("0080") + b"\x88" * 16
spec_kvs = [kv("general.architecture", STRING, "llama"), kv("general.file_type", U32, 2),
            kv("general.quantization_version", U32, 2)]
spec = gguf(spec_kvs, [("w", 2, [32, 2], q4_block + zero_block)])
want = "1ad7185d9ffa250923cde4201635f8497ade4239666851cc83d92ca9ca2834e6"
got = hashlib.sha256(spec).hexdigest()
if len(spec) != 256 or got != want:
    sys.exit(f"make_corpus.sh: the §1.13 example came out {len(spec)} bytes, sha256 {got}, expected 256 bytes, {want}")
write("spec-1.13-example.gguf", spec)
write("spec-1.13-version2.gguf", spec[:4] + struct.pack("<I", 2) + spec[8:])

# 2. Every value type, no tensors.
all_kvs = [
    kv("general.architecture", STRING, "fuzz"),
    kv("t.u8", U8, 255), kv("t.i8", I8, -128), kv("t.u16", U16, 65535), kv("t.i16", I16, -32768),
    kv("t.u32", U32, 4294967295), kv("t.i32", I32, -2147483648), kv("t.f32", F32, 0.5),
    kv("t.bool", BOOL, 1), kv("t.str", STRING, "h\u00e9llo \U0001F999"), kv("t.empty", STRING, ""),
    kv("t.u64", U64, 2 ** 64 - 1), kv("t.i64", I64, -(2 ** 63)), kv("t.f64", F64, -1e-300),
    kv("t.a.u8", ARRAY, [1, 2, 3], U8), kv("t.a.i32", ARRAY, [-1, 0, 1], I32),
    kv("t.a.f32", ARRAY, [1.0, float("inf"), float("nan")], F32), kv("t.a.bool", ARRAY, [0, 1], BOOL),
    kv("t.a.str", ARRAY, ["a", "", "b c"], STRING), kv("t.a.empty", ARRAY, [], U32),
    kv("t.a.f64", ARRAY, [0.25], F64), kv("t.a.u64", ARRAY, [7], U64),
    kv("tokenizer.ggml.tokens", ARRAY, ["a", "b", "ab"], STRING),
    kv("tokenizer.ggml.merges", ARRAY, ["a b"], STRING),
]
write("kv-all-types.gguf", gguf(all_kvs, []))

# 3. A mix of tensor types and ranks.
def pattern(n, seed):
    return bytes((i * 131 + seed * 17) & 0xFF for i in range(n))

mixed = [
    ("f32.1d", 0, [5], struct.pack("<5f", 1, -2, 3.5, 0, 1e-3)),
    ("f16.2d", 1, [4, 2], pattern(16, 1)),
    ("bf16.3d", 30, [2, 2, 2], pattern(16, 2)),
    ("q8_0.2d", 8, [32, 2], pattern(68, 3)),
    ("q4_k.1d", 12, [256], pattern(144, 4)),
    ("i8.4d", 24, [1, 2, 1, 3], pattern(6, 5)),
    ("i64.1d", 27, [2], struct.pack("<2q", -5, 7)),
    ("f64.empty", 28, [0], b""),
    ("i32.last", 26, [3, 1], struct.pack("<3i", 1, -1, 2 ** 31 - 1)),
]
write("tensors-mixed.gguf", gguf([kv("general.architecture", STRING, "fuzz")], mixed))
write("tensors-align64.gguf", gguf([kv("general.architecture", STRING, "fuzz"), kv("general.alignment", U32, 64)],
                                   mixed[:4], alignment=64))
write("empty.gguf", gguf([], []))

# 4. Corrupted variants of the spec example (the reader must refuse each cleanly).
def patch(data, at, new):
    return data[:at] + new + data[at + len(new):]

for n in (3, 23, 24, 60, 146, 190, 210, 255):
    write(f"trunc-{n}.gguf", spec[:n])
bad = {
    "bad-magic": patch(spec, 0, b"GGUG"),
    "version1": patch(spec, 4, struct.pack("<I", 1)),
    "version-swapped": patch(spec, 4, struct.pack(">I", 3)),
    "huge-tensor-count": patch(spec, 8, struct.pack("<Q", 2 ** 63)),
    "huge-kv-count": patch(spec, 16, struct.pack("<Q", 2 ** 40)),
    "key-len-huge": patch(spec, 24, struct.pack("<Q", 2 ** 62)),
    "key-empty": patch(spec, 24, struct.pack("<Q", 0)),
    "value-type-13": patch(spec, 0x34, struct.pack("<I", 13)),
    "string-len-huge": patch(spec, 0x38, struct.pack("<Q", 2 ** 31)),
    "ndims-5": patch(spec, 0x92 + 9, struct.pack("<I", 5)),
    "dim-negative": patch(spec, 0x92 + 13, struct.pack("<q", -32)),
    "dim-overflow": patch(spec, 0x92 + 13, struct.pack("<Q", 2 ** 62)),
    "type-removed-4": patch(spec, 0x92 + 29, struct.pack("<I", 4)),
    "type-intermediate-q8_1": patch(spec, 0x92 + 29, struct.pack("<I", 9)),
    "type-unknown-43": patch(spec, 0x92 + 29, struct.pack("<I", 43)),
    "offset-misaligned": patch(spec, 0x92 + 33, struct.pack("<Q", 1)),
    "offset-past-end": patch(spec, 0x92 + 33, struct.pack("<Q", 64)),
    "data-cut": spec[:0xd0],
}
# Metadata-level faults in small hand-made files.
arch = kv("general.architecture", STRING, "fuzz")
bad["nested-array"] = gguf([arch, gstr("a") + struct.pack("<IIQ", ARRAY, ARRAY, 0)], [])
bad["array-count-huge"] = gguf([arch, gstr("a") + struct.pack("<IIQ", ARRAY, U32, 2 ** 61)], [])
bad["string-array-count-huge"] = gguf([arch, gstr("a") + struct.pack("<IIQ", ARRAY, STRING, 2 ** 30)], [])
bad["bool-2"] = gguf([arch, gstr("b") + struct.pack("<IB", BOOL, 2)], [])
bad["duplicate-key"] = gguf([arch, arch], [])
bad["alignment-0"] = gguf([arch, kv("general.alignment", U32, 0)], mixed[:1])
bad["alignment-3"] = gguf([arch, kv("general.alignment", U32, 3)], mixed[:1])
bad["alignment-u64"] = gguf([arch, kv("general.alignment", U64, 32)], mixed[:1])
bad["duplicate-tensor"] = gguf([arch], [mixed[0], mixed[0]])
bad["tensor-name-64"] = gguf([arch], [("n" * 64,) + mixed[0][1:]])
bad["key-with-nul"] = gguf([kv("gen\0eral", U8, 1)], [])
bad["ne0-not-block-multiple"] = gguf([arch], [("q", 8, [31, 1], pattern(34, 9))])
for name, data in bad.items():
    write(f"bad-{name}.gguf", data)

# 5. Vocabulary-only files the tokenizer loader accepts: a byte-level BPE one (every byte's
#    stand-in character, a few merges, ChatML specials and template) and a SentencePiece one
#    (byte tokens, scores, a Llama 3.1 style template).
def byte_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


chars = byte_chars()
bpe_tokens = [chars[b] for b in range(256)] + ["\u0120t", "he", "\u0120the", "in", "ing"]
bpe_merges = ["\u0120 t", "h e", "\u0120t he", "i n", "in g"]
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
n_bpe = len(bpe_tokens)
chatml = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}")
bpe = [
    arch,
    kv("tokenizer.ggml.model", STRING, "gpt2"),
    kv("tokenizer.ggml.pre", STRING, "qwen2"),
    kv("tokenizer.ggml.tokens", ARRAY, bpe_tokens + specials, STRING),
    kv("tokenizer.ggml.token_type", ARRAY, [1] * n_bpe + [3] * len(specials), I32),
    kv("tokenizer.ggml.merges", ARRAY, bpe_merges, STRING),
    kv("tokenizer.ggml.eos_token_id", U32, n_bpe),
    kv("tokenizer.ggml.bos_token_id", U32, n_bpe),
    kv("tokenizer.ggml.add_bos_token", BOOL, 0),
    kv("tokenizer.chat_template", STRING, chatml),
]
write("vocab-bpe-chatml.gguf", gguf(bpe, []))
spm_tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "\u2581a", "a", "b", "ab", "\u2581ab"]
spm_types = [2, 3, 3] + [6] * 256 + [1] * 6
llama31 = ("{{- bos_token }}{%- set date_string = \"26 Jul 2024\" %}"
           "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
           "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
           "+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}")
spm = [
    arch,
    kv("tokenizer.ggml.model", STRING, "llama"),
    kv("tokenizer.ggml.tokens", ARRAY, spm_tokens, STRING),
    kv("tokenizer.ggml.scores", ARRAY, [0.0] * 259 + [-1.0, -2.0, -3.0, -3.0, -1.5, -0.5], F32),
    kv("tokenizer.ggml.token_type", ARRAY, spm_types, I32),
    kv("tokenizer.ggml.bos_token_id", U32, 1),
    kv("tokenizer.ggml.eos_token_id", U32, 2),
    kv("tokenizer.ggml.unknown_token_id", U32, 0),
    kv("tokenizer.chat_template", STRING, llama31),
]
write("vocab-spm-llama31.gguf", gguf(spm, []))

# 6. gguf-py's own writer, when it is installed.
try:
    import numpy as np
    from gguf import GGUFWriter

    path = os.path.join(out, "gguf-py-writer.gguf")
    w = GGUFWriter(path, arch="qwen2")
    w.add_uint32("qwen2.block_count", 1)
    w.add_float32("qwen2.rope.freq_base", 10000.0)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_tensor("token_embd.weight", np.arange(12, dtype=np.float16).reshape(3, 4))
    w.add_tensor("output_norm.weight", np.ones(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
except ImportError:
    pass
PY

echo "make_corpus.sh: $(ls "$out" | wc -l) seeds in $out"
