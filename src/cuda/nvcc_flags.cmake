# nvcc_flags.cmake - the flags every nvcc compile of src/cuda/*.cu takes, in one place: the
# build (CMakeLists.txt) and every tool that compiles the same files again for a report
# (the kernel table of registers and shared memory, the FMA audit) read RG_NVCC_DEVICE_FLAGS,
# so what they report is what the build runs.
#
# --fmad=false: nvcc would otherwise contract a*b+c into one fused multiply-add wherever it
# likes, while the host execution of the same source (built with -ffp-contract=off) rounds
# the product and the sum apart: the two would differ by construction. Without contraction
# every fused multiply-add is one the source writes (fmaf / __fmaf_rn), which both builds
# execute as one rounding, so the host execution has the GPU's rounding.
# scripts/check-fma.sh fails when this flag is missing or a kernel's PTX could still fuse.
set(RG_NVCC_DEVICE_FLAGS "--fmad=false")
