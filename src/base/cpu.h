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
// Number of online cores (at least 1).
int rg_cpu_count(void);

#endif
