// cpu.h - what the CPU we run on can do, asked once.
#ifndef RG_BASE_CPU_H
#define RG_BASE_CPU_H

// 1 when AVX2, FMA and F16C are all usable (CPU and OS), so *_avx2.c kernels may run.
int rg_cpu_has_avx2(void);
// Number of online cores (at least 1).
int rg_cpu_count(void);

#endif
