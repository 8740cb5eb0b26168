# nvcc_flags.cmake - the flags every nvcc compile of src/cuda/*.cu takes, in one place: the
# build (CMakeLists.txt) and every tool that compiles the same files again for a report
# (the kernel table of registers and shared memory, the FMA audit) read RG_NVCC_DEVICE_FLAGS,
# so what they report is what the build runs.
set(RG_NVCC_DEVICE_FLAGS "")
