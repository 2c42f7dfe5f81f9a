# Provides the target meshtrain::kokkos, for meshtrain's build and, installed beside
# meshtrainConfig.cmake, for projects that find_package(meshtrain).
#
# Clusters bring Kokkos 4.x/5.x with a working KokkosConfig.cmake: then meshtrain::kokkos is its
# Kokkos::kokkos. Debian 12 ships Kokkos 3.4 inside Trilinos, whose KokkosConfig.cmake points at a
# non-existent /usr/lib/include: for any 3.x we build the target by hand from Kokkos_Core.hpp
# (Debian: /usr/include/trilinos) and the core library (Debian: libtrilinos_kokkoscore), or from
# KOKKOS_FALLBACK_INCLUDE_DIR and KOKKOS_FALLBACK_CORE_LIBRARY when set (the `openmp` preset).
# MESHTRAIN_KOKKOS_FROM_CONFIG says which way it was found.
#
# An imported target, not a project one, so that meshtrain's exported targets name it and the
# installed config recreates it with this same module.
if(TARGET meshtrain::kokkos)
  return()
endif()
add_library(meshtrain::kokkos INTERFACE IMPORTED)

if(NOT MESHTRAIN_KOKKOS_FORCE_FALLBACK)
  find_package(Kokkos 4 CONFIG QUIET)
endif()
if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  message(STATUS "Kokkos ${Kokkos_VERSION} from its CMake config (${Kokkos_DIR})")
  target_link_libraries(meshtrain::kokkos INTERFACE Kokkos::kokkos)
  set(MESHTRAIN_KOKKOS_FROM_CONFIG TRUE)
  return()
endif()
set(MESHTRAIN_KOKKOS_FROM_CONFIG FALSE)

find_path(KOKKOS_FALLBACK_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos kokkos)
find_library(KOKKOS_FALLBACK_CORE_LIBRARY NAMES kokkoscore trilinos_kokkoscore)
if(NOT KOKKOS_FALLBACK_INCLUDE_DIR OR NOT KOKKOS_FALLBACK_CORE_LIBRARY)
  message(FATAL_ERROR "Kokkos not found: set Kokkos_ROOT to a Kokkos 4.x install, or install Debian's libtrilinos-kokkos-dev")
endif()
find_package(Threads REQUIRED)
target_include_directories(meshtrain::kokkos SYSTEM INTERFACE "${KOKKOS_FALLBACK_INCLUDE_DIR}")
target_link_libraries(meshtrain::kokkos INTERFACE "${KOKKOS_FALLBACK_CORE_LIBRARY}" Threads::Threads ${CMAKE_DL_LIBS})
# A Kokkos with the OpenMP backend (share/scripts/kokkos-openmp.sh) puts `omp` pragmas in its headers.
file(STRINGS "${KOKKOS_FALLBACK_INCLUDE_DIR}/KokkosCore_config.h" _meshtrain_kokkos_openmp
     REGEX "^#define KOKKOS_ENABLE_OPENMP$")
if(_meshtrain_kokkos_openmp)
  find_package(OpenMP REQUIRED COMPONENTS CXX)
  target_link_libraries(meshtrain::kokkos INTERFACE OpenMP::OpenMP_CXX)
endif()
message(STATUS "Kokkos (fallback module): ${KOKKOS_FALLBACK_INCLUDE_DIR}, ${KOKKOS_FALLBACK_CORE_LIBRARY}")
