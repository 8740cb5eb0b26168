#!/usr/bin/env python3
"""gen_iq_grids.py - write src/tensor/quant/quant_iq_grids.{c,h} from gguf-py.

The IQ1/IQ2/IQ3 lookup grids cannot be derived by formula (spec
shared/spec/gguf-and-types.md §4.6); they are data. The installed `gguf` Python
package (gguf-py, MIT licensed, part of llama.cpp / ggml) carries them in
gguf/quants.py as hex strings with 2 or 3 bits per grid coordinate plus a map
from coordinate code to byte value. This script decodes them, rebuilds the
u64 / u32 entries that ggml uses (byte j of an entry = element j of the group,
little-endian), and checks every table against the SHA-256 of its
little-endian bytes given in the spec §4.6 table. Any mismatch stops the
script before anything is written.

Usage: python3 tools/gen_iq_grids.py [--check]
  --check  verify only; compare the generated text with the files on disk and
           exit 1 when they differ.
"""
import hashlib
import os
import struct
import sys

try:
    import gguf.quants as gq
except ImportError:  # pragma: no cover
    sys.exit("gen_iq_grids.py: the `gguf` Python package is not installed (pip install gguf)")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# One .c file a family (each under 600 lines), one header for all.
OUT_C = {fam: os.path.join(ROOT, "src", "tensor", "quant", f"quant_{fam}_grids.c") for fam in ("iq1", "iq2", "iq3")}
OUT_H = os.path.join(ROOT, "src", "tensor", "quant", "quant_iq_grids.h")

# Spec §4.6: SHA-256 of each table's little-endian bytes.
SPEC_SHA256 = {
    "iq2xxs_grid": "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54",
    "iq2xs_grid": "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de",
    "iq2s_grid": "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88",
    "iq3xxs_grid": "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d",
    "iq3s_grid": "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f",
    "iq1s_grid": "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a",
    "ksigns_iq2xs": "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31",
}

# (C name, gguf-py class, entries, values per entry)
GRIDS = [
    ("iq2xxs_grid", gq.IQ2_XXS, 256, 8),
    ("iq2xs_grid", gq.IQ2_XS, 512, 8),
    ("iq2s_grid", gq.IQ2_S, 1024, 8),
    ("iq3xxs_grid", gq.IQ3_XXS, 256, 4),
    ("iq3s_grid", gq.IQ3_S, 512, 4),
    ("iq1s_grid", gq.IQ1_S, 2048, 8),
]

NOTICE = """\
The tables in this file are data taken from gguf-py (gguf/quants.py, the
`gguf` Python package of llama.cpp), which carries the grids of ggml's
src/ggml-common.h. Both are MIT licensed:

  Copyright (c) 2023-2026 The ggml authors
  Copyright (c) 2023 Georgi Gerganov (gguf-py package notice)

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE."""


def fail(msg):
    sys.exit("gen_iq_grids.py: FAILED: " + msg)


def decode_grid(cls, entries, per_entry):
    """The grid as a list of entries, each a list of byte values (0..255)."""
    hexs = bytes(cls.grid_hex)
    gmap = list(cls.grid_map)
    bits = (len(gmap) - 1).bit_length()  # 3 codes -> 2 bits, 8 codes -> 3 bits
    per_byte = 8 // bits                 # 4 or 2 codes per byte
    step = 8 // per_byte                 # codes sit at bit 0, step, 2*step, ...
    raw = bytes.fromhex(hexs.decode("ascii"))
    codes = []
    for b in raw:
        for k in range(per_byte):
            codes.append((b >> (k * step)) & ((1 << bits) - 1))
    if len(codes) != entries * per_entry:
        fail(f"{cls.__name__}: {len(codes)} codes, expected {entries * per_entry}")
    vals = []
    for c in codes:
        if c >= len(gmap):
            fail(f"{cls.__name__}: code {c} outside the map")
        v = int(gmap[c])
        vals.append(v & 0xFF)  # int8 -1 is stored as the byte 0xFF (IQ1 grid)
    grid = [vals[i * per_entry:(i + 1) * per_entry] for i in range(entries)]
    # Cross-check with gguf-py's own decoder where it is available.
    try:
        cls.init_grid()
        g = cls.grid.reshape(entries, per_entry)
        for i in range(entries):
            for j in range(per_entry):
                if (int(g[i][j]) & 0xFF) != grid[i][j]:
                    fail(f"{cls.__name__}: our decoding differs from gguf-py's at entry {i}")
    except AttributeError:
        pass
    return grid


def entry_int(e):
    return sum(b << (8 * j) for j, b in enumerate(e))


def le_bytes(grid):
    return b"".join(bytes(e) for e in grid)


def main():
    check_only = "--check" in sys.argv[1:]
    tables = {}
    for name, cls, entries, per in GRIDS:
        grid = decode_grid(cls, entries, per)
        sha = hashlib.sha256(le_bytes(grid)).hexdigest()
        if sha != SPEC_SHA256[name]:
            fail(f"{name}: SHA-256 {sha} differs from the spec's {SPEC_SHA256[name]}")
        tables[name] = (grid, per)
        print(f"{name}: {entries} x u{8 * per}, SHA-256 matches the spec")

    ks = bytes(gq.IQ2_XXS.ksigns)
    if len(ks) != 128:
        fail(f"ksigns_iq2xs: {len(ks)} bytes, expected 128")
    sha = hashlib.sha256(ks).hexdigest()
    if sha != SPEC_SHA256["ksigns_iq2xs"]:
        fail(f"ksigns_iq2xs: SHA-256 {sha} differs from the spec's")
    formula = bytes(i | (bin(i).count("1") & 1) << 7 for i in range(128))
    if formula != ks:
        fail("ksigns_iq2xs: gguf-py's table differs from the spec formula")
    print("ksigns_iq2xs: 128 x u8, SHA-256 matches the spec and the formula")

    gguf_version = "unknown"
    try:
        from importlib.metadata import version
        gguf_version = version("gguf")
    except Exception:
        pass

    c_texts = {}
    for fam in ("iq1", "iq2", "iq3"):
        c = []
        c.append(f"// quant_{fam}_grids.c - lookup grids of the {fam.upper()} types (spec §4.6).")
        c.append("//")
        c.append(f"// GENERATED by tools/gen_iq_grids.py from gguf-py {gguf_version}; do not edit.")
        c.append("// Each table was checked against the SHA-256 of its little-endian bytes in")
        c.append("// the spec's §4.6 table (tests/test_quant_iq.c checks it again).")
        c.append("// Byte j of an entry (little-endian) is the value of element j of the group;")
        c.append("// iq1s_grid bytes are int8 (-1, 0, +1).")
        c.append("//")
        for line in NOTICE.splitlines():
            c.append(("// " + line).rstrip())
        c.append("#include \"tensor/quant/quant_iq_grids.h\"")
        c.append("")
        for name, (grid, per) in tables.items():
            if not name.startswith(fam):
                continue
            ctype = "uint64_t" if per == 8 else "uint32_t"
            width = 16 if per == 8 else 8
            suffix = "ULL" if per == 8 else "U"
            per_line = 4 if per == 8 else 8
            c.append(f"const {ctype} rg_{name}[{len(grid)}] = {{")
            for i in range(0, len(grid), per_line):
                row = ", ".join(f"0x{entry_int(e):0{width}x}{suffix}" for e in grid[i:i + per_line])
                c.append(f"    {row},")
            c.append("};")
            c.append("")
        if fam == "iq2":
            c.append("const uint8_t rg_ksigns_iq2xs[128] = {")
            for i in range(0, 128, 16):
                c.append("    " + ", ".join(f"0x{b:02x}" for b in ks[i:i + 16]) + ",")
            c.append("};")
        while c[-1] == "":
            c.pop()
        c_texts[OUT_C[fam]] = "\n".join(c) + "\n"

    h = []
    h.append("// quant_iq_grids.h - the IQ1/IQ2/IQ3 lookup grids (spec §4.6).")
    h.append("//")
    h.append("// GENERATED by tools/gen_iq_grids.py; do not edit. The data is from gguf-py /")
    h.append("// ggml (MIT, Copyright (c) 2023-2026 The ggml authors; see")
    h.append("// LICENSE-ggml-grids.txt). Entry e, element j: byte j of the little-endian")
    h.append("// entry, i.e. (entry >> 8*j) & 0xFF (int8 for iq1s_grid).")
    h.append("#ifndef RG_QUANT_IQ_GRIDS_H")
    h.append("#define RG_QUANT_IQ_GRIDS_H")
    h.append("")
    h.append("#include <stdint.h>")
    h.append("")
    for name, (grid, per) in tables.items():
        ctype = "uint64_t" if per == 8 else "uint32_t"
        h.append(f"extern const {ctype} rg_{name}[{len(grid)}];")
    h.append("// ksigns_iq2xs[i] = i | (popcount(i) & 1) << 7: 7 sign bits + even parity.")
    h.append("extern const uint8_t rg_ksigns_iq2xs[128];")
    h.append("")
    h.append("#endif")
    h_text = "\n".join(h) + "\n"

    if check_only:
        same = True
        for path, text in list(c_texts.items()) + [(OUT_H, h_text)]:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        print(f"{path}: differs from the generated text")
                        same = False
            except OSError:
                print(f"{path}: missing")
                same = False
        sys.exit(0 if same else 1)

    for path, text in list(c_texts.items()) + [(OUT_H, h_text)]:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
