# check_symbols.cmake - run by the rg_cuda_host_symbols target (cuda_host.cmake):
# fails when an object of the host execution has an undefined CUDA runtime or
# cuBLAS symbol, i.e. a call that src/cuda_host/rename.h does not rename and
# that would silently reach the real libcudart/libcublas of the nvcc twin.
#   cmake -DNM=nm "-DOBJECTS=a.o;b.o" -P check_symbols.cmake
set(bad "")
foreach(o ${OBJECTS})
  execute_process(COMMAND "${NM}" -u "${o}" OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_symbols: ${NM} -u ${o} failed")
  endif()
  string(REGEX MATCHALL "U (cuda|cublas|cu[A-Z])[A-Za-z0-9_]*" hits "${syms}")
  foreach(h ${hits})
    string(REPLACE "U " "" h "${h}")
    get_filename_component(name "${o}" NAME)
    list(APPEND bad "${h} (${name})")
  endforeach()
endforeach()
if(bad)
  list(REMOVE_DUPLICATES bad)
  string(REPLACE ";" ", " bad "${bad}")
  message(FATAL_ERROR "the host execution of the CUDA code calls CUDA symbols that src/cuda_host/rename.h does not rename: ${bad}")
endif()
