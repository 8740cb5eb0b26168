// cpu.h - what the CPU we run on can do, asked once.
#ifndef RG_BASE_CPU_H
#define RG_BASE_CPU_H

// 1 when AVX2, FMA and F16C are all usable (CPU and OS), so *_avx2.c kernels may run.
int rg_cpu_has_avx2(void);
// For tests that compare the two paths in one process: on = 1 makes rg_cpu_has_avx2() answer
// 0 from now on (what RG_NO_AVX2=1 does; kernels that asked before keep their choice), on = 0
// detects again. Not for use while kernels run.
void rg_cpu_force_baseline(int on);
// 1 when AVX512 F/BW/VL and VNNI are usable (CPU and OS), so *_avx512.c kernels may run
// (RG_NO_AVX512=1 in the environment says 0, to compare against the other paths).
int rg_cpu_has_avx512_vnni(void);
// 1 when, on top of that, AVX512_BF16 is usable (VDPBF16PS); RG_NO_AVX512=1 says 0 too.
int rg_cpu_has_avx512_bf16(void);
// The matrix unit: 1 when AMX-TILE and AMX-BF16 (TDPBF16PS) are usable: CPUID leaf 7 says so, the OS
// saves the tile state (XCR0 bits 17-18) and the kernel granted this process tile data
// (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once; a refusal is one line on stderr, never a SIGILL).
// RG_NO_AMX=1 (or RG_NO_AVX512=1, RG_NO_AVX2=1) says 0. rg_cpu_has_amx_int8: the same with AMX-INT8.
int rg_cpu_has_amx_bf16(void);
int rg_cpu_has_amx_int8(void);
// Why AMX is not used, for `retrograd report` ("" when it is): "no AMX in CPUID", "RG_NO_AMX=1",
// "the OS does not save the tile state (XCR0)", "the kernel refused tile data: <errno text>".
const char *rg_cpu_amx_reason(void);
// What products in BF16 run on: "amx" (TDPBF16PS/TDPBUSD tiles), "avx512_bf16" (VDPBF16PS),
// or "none".
const char *rg_cpu_matrix_unit(void);
// Number of online cores (at least 1).
int rg_cpu_count(void);

#endif
