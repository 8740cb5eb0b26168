# Independent f32 emulation of spec §5.5/§5.6 IQ4_NL / IQ4_XS quantizers, compared to the C build.
import ctypes, numpy as np
f32 = np.float32
KV = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
def best_index(x):
    x = f32(x)
    if x <= KV[0]: return 0
    if x >= KV[15]: return 15
    lo, hi = 0, 15
    while hi - lo > 1:
        mid = (lo + hi)//2
        if x < KV[mid]: hi = mid
        else: lo = mid
    return lo if (x - f32(KV[lo])) < (f32(KV[hi]) - x) else hi
def nearest_int(v):
    t = np.array([f32(v) + f32(12582912.0)], dtype=np.float32).view(np.int32)[0]
    return int((t & 0x7fffff) - 0x400000)
def quant(x, sb, qw):
    x = x.astype(np.float32)
    s2 = f32(0)
    for v in x: s2 = f32(s2 + f32(v*v))
    s2 = f32(s2 * f32(f32(2)/f32(sb)))
    nsub = sb//32; scales=[f32(0)]*nsub; maxs=f32(0); amaxs=f32(0)
    for ib in range(nsub):
        xb = x[32*ib:32*ib+32]
        if qw is not None: w = [f32(f32(qw[32*ib+j]) * np.sqrt(f32(s2 + f32(xb[j]*xb[j])), dtype=np.float32)) for j in range(32)]
        else: w = [f32(v*v) for v in xb]
        amax=f32(0); mx=f32(0)
        for v in xb:
            if abs(v) > amax: amax=abs(v); mx=v
        if amax < f32(1e-15): scales[ib]=f32(0); continue
        d = f32(-mx / f32(-127)); idd = f32(f32(1)/d)
        sqx=f32(0); sq2=f32(0)
        for j in range(32):
            q = f32(KV[best_index(f32(idd*xb[j]))])
            sqx = f32(sqx + f32(f32(w[j]*q)*xb[j])); sq2 = f32(sq2 + f32(f32(w[j]*q)*q))
        with np.errstate(all='ignore'):
            d = f32(sqx/sq2); best = f32(d*sqx)
        for it in range(-7, 8):
            idd = f32(f32(it - 127)/mx)
            sqx=f32(0); sq2=f32(0)
            for j in range(32):
                q = f32(KV[best_index(f32(idd*xb[j]))])
                sqx = f32(sqx + f32(f32(w[j]*q)*xb[j])); sq2 = f32(sq2 + f32(f32(w[j]*q)*q))
            if sq2 > 0 and f32(sqx*sqx) > f32(best*sq2):
                d = f32(sqx/sq2); best = f32(d*sqx)
        scales[ib] = d
        if abs(d) > amaxs: amaxs = abs(d); maxs = d
    L = [0]*sb
    if nsub > 1:
        D = f32(-maxs/f32(32)); out = bytearray(136)
        out[0:2] = np.array([D], dtype=np.float16).view(np.uint8).tobytes()
        iD = f32(f32(1)/D) if D != 0 else f32(0)
        sh = 0
        for ib in range(nsub):
            l = max(-32, min(31, nearest_int(f32(iD*scales[ib]))))
            dl = f32(D * f32(l)); idl = f32(f32(1)/dl) if dl != 0 else f32(0)
            for j in range(32): L[32*ib+j] = best_index(f32(idl*x[32*ib+j]))
            l += 32
            out[4+ib//2] |= (l & 15) << (4*(ib%2)); sh |= (l >> 4) << (2*ib)
        out[2] = sh & 255; out[3] = sh >> 8; qoff = 8
    else:
        out = bytearray(18); out[0:2] = np.array([scales[0]], dtype=np.float16).view(np.uint8).tobytes()
        idd = f32(f32(1)/scales[0]) if scales[0] != 0 else f32(0)
        for j in range(32): L[j] = best_index(f32(idd*x[j]))
        qoff = 2
    for i in range(nsub):
        for j in range(16): out[qoff+16*i+j] = L[32*i+j] | (L[32*i+16+j] << 4)
    return bytes(out)

