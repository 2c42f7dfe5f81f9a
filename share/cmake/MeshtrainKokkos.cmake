# Provides the target meshtrain::kokkos.
#
# Clusters bring Kokkos 4.x/5.x with a working KokkosConfig.cmake: then meshtrain::kokkos is its
# Kokkos::kokkos. Debian 12 ships Kokkos 3.4 inside Trilinos, whose KokkosConfig.cmake points at a
# non-existent /usr/lib/include: for any 3.x we build the target by hand from Kokkos_Core.hpp
# (Debian: /usr/include/trilinos) and the core library (Debian: libtrilinos_kokkoscore).
add_library(meshtrain_kokkos INTERFACE)
add_library(meshtrain::kokkos ALIAS meshtrain_kokkos)

if(NOT MESHTRAIN_KOKKOS_FORCE_FALLBACK)
  find_package(Kokkos 4 CONFIG QUIET)
endif()
if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  message(STATUS "Kokkos ${Kokkos_VERSION} from its CMake config (${Kokkos_DIR})")
  target_link_libraries(meshtrain_kokkos INTERFACE Kokkos::kokkos)
  return()
endif()

find_path(KOKKOS_FALLBACK_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos kokkos)
find_library(KOKKOS_FALLBACK_CORE_LIBRARY NAMES kokkoscore trilinos_kokkoscore)
if(NOT KOKKOS_FALLBACK_INCLUDE_DIR OR NOT KOKKOS_FALLBACK_CORE_LIBRARY)
  message(FATAL_ERROR "Kokkos not found: set Kokkos_ROOT to a Kokkos 4.x install, or install Debian's libtrilinos-kokkos-dev")
endif()
find_package(Threads REQUIRED)
target_include_directories(meshtrain_kokkos SYSTEM INTERFACE "${KOKKOS_FALLBACK_INCLUDE_DIR}")
target_link_libraries(meshtrain_kokkos INTERFACE "${KOKKOS_FALLBACK_CORE_LIBRARY}" Threads::Threads ${CMAKE_DL_LIBS})
message(STATUS "Kokkos (fallback module): ${KOKKOS_FALLBACK_INCLUDE_DIR}, ${KOKKOS_FALLBACK_CORE_LIBRARY}")
