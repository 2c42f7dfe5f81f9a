# Provides meshtrain::blas: a CBLAS (OpenBLAS preferred, for its threaded sgemm). An imported
# target, so that the installed meshtrainConfig.cmake recreates it with this module (the host GEMM
# dispatch in meshtrain::kernels links it).
if(TARGET meshtrain::blas)
  return()
endif()
find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
find_library(CBLAS_LIBRARY NAMES openblas cblas blas)
if(NOT CBLAS_INCLUDE_DIR OR NOT CBLAS_LIBRARY)
  message(FATAL_ERROR "No CBLAS found: install libopenblas-dev")
endif()
add_library(meshtrain::blas INTERFACE IMPORTED)
target_include_directories(meshtrain::blas SYSTEM INTERFACE "${CBLAS_INCLUDE_DIR}")
target_link_libraries(meshtrain::blas INTERFACE "${CBLAS_LIBRARY}")
if(CBLAS_LIBRARY MATCHES "openblas")
  target_compile_definitions(meshtrain::blas INTERFACE MESHTRAIN_HAVE_OPENBLAS=1)
endif()
message(STATUS "CBLAS: ${CBLAS_LIBRARY}")
