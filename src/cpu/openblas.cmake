# openblas.cmake - optional OpenBLAS behind rg_sgemm (src/cpu/gemm.c).
#
# Use: include(${CMAKE_SOURCE_DIR}/src/cpu/openblas.cmake) anywhere after
# project() in the top CMakeLists.txt (it can also be given on the command line
# as -DCMAKE_PROJECT_INCLUDE=<this file>). Where the targets rg_objects, rg_link
# and retrograd_static/_shared already exist it wires them at once; otherwise it
# defers that to the end of the top directory.
#
# When OpenBLAS is found (Debian/Ubuntu: apt-get install libopenblas-dev, whose
# headers live in /usr/include/x86_64-linux-gnu/openblas-pthread): gemm.c gets
# RG_HAVE_OPENBLAS=1 and <cblas.h>, and every program links libopenblas. When it
# is not (the GPU machine, a plain container) nothing changes: the build
# succeeds and our own kernel serves every product. -DRG_OPENBLAS=OFF forces that.
option(RG_OPENBLAS "Use OpenBLAS for large F32 SGEMMs when it is found" ON)
set(RG_HAVE_OPENBLAS OFF)
if(RG_OPENBLAS)
  # openblas_config.h exists only in OpenBLAS's include folder, so the cblas.h
  # beside it is OpenBLAS's (not netlib's through the alternatives symlink).
  find_path(RG_OPENBLAS_INCLUDE_DIR NAMES openblas_config.h
    PATHS /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu /usr/include /usr/local/include
          /opt/OpenBLAS/include /opt/homebrew/opt/openblas/include
    PATH_SUFFIXES openblas-pthread openblas openblas-openmp openblas-serial)
  get_filename_component(rg_openblas_variant "${RG_OPENBLAS_INCLUDE_DIR}" NAME)
  find_library(RG_OPENBLAS_LIBRARY NAMES openblas
    HINTS /usr/lib/x86_64-linux-gnu/${rg_openblas_variant} /usr/lib/aarch64-linux-gnu/${rg_openblas_variant}
    PATHS /usr/lib/x86_64-linux-gnu /usr/lib /usr/local/lib /opt/OpenBLAS/lib /opt/homebrew/opt/openblas/lib)
  if(RG_OPENBLAS_INCLUDE_DIR AND RG_OPENBLAS_LIBRARY AND EXISTS "${RG_OPENBLAS_INCLUDE_DIR}/cblas.h")
    set(RG_HAVE_OPENBLAS ON)
    message(STATUS "retrograd: OpenBLAS ON (${RG_OPENBLAS_LIBRARY}, headers ${RG_OPENBLAS_INCLUDE_DIR})")
  else()
    message(STATUS "retrograd: OpenBLAS not found; rg_sgemm uses its own kernel only")
  endif()
else()
  message(STATUS "retrograd: OpenBLAS OFF (RG_OPENBLAS=OFF)")
endif()

function(rg_openblas_wire)
  if(NOT RG_HAVE_OPENBLAS)
    return()
  endif()
  # Only gemm.c includes <cblas.h>; the rest of the library asks rg_sgemm_have_openblas().
  target_compile_definitions(rg_objects PRIVATE RG_HAVE_OPENBLAS=1)
  target_include_directories(rg_objects SYSTEM PRIVATE "${RG_OPENBLAS_INCLUDE_DIR}")
  target_link_libraries(rg_link INTERFACE "${RG_OPENBLAS_LIBRARY}")
  foreach(t retrograd_static retrograd_shared)
    if(TARGET ${t})
      target_link_libraries(${t} PUBLIC "${RG_OPENBLAS_LIBRARY}")
    endif()
  endforeach()
endfunction()

if(TARGET rg_objects AND TARGET rg_link)
  rg_openblas_wire()
else()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL rg_openblas_wire)
endif()
