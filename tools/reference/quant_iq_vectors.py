# tools/reference/quant_iq_vectors.py - regenerates the SHA-256 vectors in tests/test_quant_iq.c
# (run: python3 tools/reference/quant_iq_vectors.py; needs numpy and the gguf package).
# Computes the SHA-256 vectors embedded in tests/test_quant_iq.c, from gguf-py
# where it can, and from f32 emulations of the spec otherwise.
import hashlib, numpy as np, sys
sys.path.insert(0, __import__('os').path.dirname(__file__))
from gguf import GGMLQuantizationType as T
import gguf.quants as gq
M64 = (1 << 64) - 1
class SM:
    def __init__(s, seed): s.s = seed & M64
    def next(s):
        s.s = (s.s + 0x9E3779B97F4A7C15) & M64
        z = s.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)
SIZES = {'iq2_xxs': (16, 256, 66, [0]), 'iq2_xs': (17, 256, 74, [0]), 'iq3_xxs': (18, 256, 98, [0]),
         'iq1_s': (19, 256, 50, [0]), 'iq4_nl': (20, 32, 18, [0]), 'iq3_s': (21, 256, 110, [0]),
         'iq2_s': (22, 256, 82, [0]), 'iq4_xs': (23, 256, 136, [0]), 'iq1_m': (29, 256, 56, 'iq1m'),
         'tq1_0': (34, 256, 54, [52]), 'tq2_0': (35, 256, 66, [64]), 'mxfp4': (39, 32, 17, []),
         'nvfp4': (40, 64, 36, []), 'q1_0': (41, 128, 18, [0]), 'q2_0': (42, 64, 18, [0])}
NBLK = 64
def blocks(name):
    tid, qk, nbytes, patch = SIZES[name]
    r = SM(0x5EED0000 + tid)
    out = bytearray()
    for b in range(NBLK):
        blk = bytearray(r.next() >> 56 for _ in range(nbytes))
        v = r.next()
        h = ((v >> 63) << 15) | ((8 + ((v >> 10) & 7)) << 10) | (v & 0x3FF)
        if patch == 'iq1m':
            for k in range(4):
                w = blk[48 + 2*k] | blk[49 + 2*k] << 8
                w = (w & 0x0FFF) | (((h >> (4*k)) & 15) << 12)
                blk[48 + 2*k] = w & 255; blk[49 + 2*k] = w >> 8
        else:
            for o in patch:
                blk[o] = h & 255; blk[o+1] = h >> 8
        out += blk
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(NBLK, nbytes)
GQ = {'iq2_xxs': T.IQ2_XXS, 'iq2_xs': T.IQ2_XS, 'iq3_xxs': T.IQ3_XXS, 'iq1_s': T.IQ1_S, 'iq4_nl': T.IQ4_NL,
      'iq3_s': T.IQ3_S, 'iq2_s': T.IQ2_S, 'iq4_xs': T.IQ4_XS, 'iq1_m': T.IQ1_M, 'tq1_0': T.TQ1_0,
      'tq2_0': T.TQ2_0, 'mxfp4': T.MXFP4, 'nvfp4': T.NVFP4}
f32 = np.float32
def deq_emul(name, bl):
    out = []
    for blk in bl:
        d = np.frombuffer(bytes(blk[0:2]), dtype=np.float16).astype(np.float32)[0]
        if name == 'q1_0':
            for j in range(128): out.append(d if (blk[2 + j//8] >> (j % 8)) & 1 else -d)
        else:
            for j in range(64): out.append(f32(f32(((int(blk[2 + j//4]) >> (2*(j % 4))) & 3) - 1) * d))
    return np.array(out, dtype=np.float32)
def sha(a): return hashlib.sha256(np.ascontiguousarray(a).astype('<f4').tobytes() if a.dtype == np.float32 else bytes(a)).hexdigest()
print("// dequant vectors")
for name in SIZES:
    bl = blocks(name)
    with np.errstate(all='ignore'):
        y = gq.dequantize(bl, GQ[name]).reshape(-1).astype(np.float32) if name in GQ else deq_emul(name, bl)
    print(f'{name} {"gguf-py" if name in GQ else "emul"} {sha(y)}')

# quantize input
def qinput(n=1024):
    r = SM(0xF10A7)
    xs = []
    scale = 1.0
    for i in range(n):
        if i % 64 == 0: scale = 2.0 ** (int(r.next() % 9) - 4)
        v = f32((int(r.next() >> 44) - 524288) * 2.0**-17 * scale)
        if i % 37 == 0: v = f32(v * 16)
        if 320 <= i < 384: v = f32(0)
        xs.append(v)
    return np.array(xs, dtype=np.float32)
def qweights(n=1024):
    r = SM(0x1A7E1C)
    return np.array([(1 + (r.next() >> 56)) / 64.0 for _ in range(n)], dtype=np.float32)
x = qinput(); w = qweights()
print("// quantize vectors; input sha", sha(x), "weights sha", sha(w))
for name, qt in [('tq1_0', T.TQ1_0), ('tq2_0', T.TQ2_0), ('mxfp4', T.MXFP4)]:
    print(name, 'gguf-py', hashlib.sha256(gq.quantize(x, qt).tobytes()).hexdigest())
# nvfp4 from gguf-py pieces
N = x.size // 64
amax = np.abs(x.reshape(-1, 16)).max(axis=1)
u = gq.NVFP4.fp32_to_ue4m3((amax / np.float32(6)).astype(np.float32))
d = gq.NVFP4.ue4m3_to_fp32(u).astype(np.float32)
kv = np.array(gq.NVFP4.kvalues, dtype=np.float32)
codes = np.argmin(np.abs(d.reshape(-1,1,1) * kv.reshape(1,1,16) - x.reshape(-1,16,1)), axis=-1).astype(np.uint8)
qs = (codes[:, :8] | (codes[:, 8:] << 4)).reshape(N, 32)
print('nvfp4 gguf-py-pieces', hashlib.sha256(np.concatenate([u.reshape(N, 4), qs], axis=1).astype(np.uint8).tobytes()).hexdigest())
import importlib.util
spec = importlib.util.spec_from_file_location('iq4py', __import__('os').path.join(__import__('os').path.dirname(__file__), 'iq4emul.py')); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
for name, sb in [('iq4_nl', 32), ('iq4_xs', 256)]:
    for useW in (False, True):
        out = b''.join(m.quant(x[i:i+sb], sb, w[i:i+sb] if useW else None) for i in range(0, x.size, sb))
        print(name + ('_imatrix' if useW else ''), 'emul', hashlib.sha256(out).hexdigest())
# q1_0 / q2_0 emulation
out = bytearray()
for i in range(0, x.size, 128):
    xb = x[i:i+128]; s = f32(0)
    for v in xb: s = f32(s + abs(v))
    dd = f32(s / f32(128)); out += np.array([dd], dtype=np.float16).tobytes()
    q = bytearray(16)
    for j in range(128):
        if xb[j] >= 0: q[j//8] |= 1 << (j % 8)
    out += q
print('q1_0 emul', hashlib.sha256(bytes(out)).hexdigest())
out = bytearray()
for i in range(0, x.size, 64):
    xb = x[i:i+64]; amax = f32(0)
    for v in xb:
        if abs(v) > amax: amax = abs(v)
    idd = f32(f32(1)/amax) if amax > 0 else f32(0)
    out += np.array([amax], dtype=np.float16).tobytes()
    q = bytearray(16)
    for j in range(64):
        t = f32(xb[j]*idd); r = np.floor(abs(t) + 0.5) * np.sign(t)  # roundf, ties away
        qq = int(min(3, max(0, r + 1)))
        q[j//4] |= qq << (2*(j % 4))
    out += q
print('q2_0 emul', hashlib.sha256(bytes(out)).hexdigest())
