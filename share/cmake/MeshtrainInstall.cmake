# Install rules and the CMake package. `cmake --install build --prefix P` gives
#
#   P/bin/meshtrain                              the binary
#   P/lib/libmeshtrain_*.a                       the libraries (static)
#   P/include/meshtrain/{core,io,train,...}/     their headers, included as "io/checkpoint/file.hpp"
#   P/lib/cmake/meshtrain/                       meshtrainConfig.cmake (+ Version), the exported
#                                                targets, and the modules that find Kokkos and CBLAS
#   P/share/meshtrain/jobs/, slurm/              run configs, sbatch scripts
#   P/share/doc/meshtrain/                       share/docs
#
# so that another project can `find_package(meshtrain CONFIG REQUIRED)` and link meshtrain::core,
# meshtrain::io, meshtrain::train, ... (tests/install builds one). In this build the same names
# are aliases of the meshtrain_<folder> targets.
include(CMakePackageConfigHelpers)

set(MESHTRAIN_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/meshtrain")

set(_meshtrain_export_targets meshtrain)
foreach(lib IN ITEMS core exec kernels parallel model optim io state train plan hf commands)
  add_library(meshtrain::${lib} ALIAS meshtrain_${lib})
  set_target_properties(meshtrain_${lib} PROPERTIES EXPORT_NAME ${lib})
  list(APPEND _meshtrain_export_targets meshtrain_${lib})
endforeach()
if(MESHTRAIN_ENABLE_CUDA)  # the device GEMM dispatch in meshtrain::kernels links it
  set_target_properties(meshtrain_cublas PROPERTIES EXPORT_NAME cublas)
  list(APPEND _meshtrain_export_targets meshtrain_cublas)
endif()
if(MESHTRAIN_ENABLE_CUDA AND TARGET meshtrain_cudnn)  # cuDNN's fused attention, for the device dispatch
  set_target_properties(meshtrain_cudnn PROPERTIES EXPORT_NAME cudnn)
  list(APPEND _meshtrain_export_targets meshtrain_cudnn)
endif()

# The installed binary keeps the run paths of the shared libraries it was linked with outside the
# system's directories (a site's HDF5, Kokkos, MPI modules), so that it runs in a job that loaded
# other modules or none.
if(NOT DEFINED CMAKE_INSTALL_RPATH_USE_LINK_PATH)
  set_target_properties(meshtrain PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
endif()

install(TARGETS ${_meshtrain_export_targets} EXPORT meshtrainTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Every header of src/<folder>/ and io/, in the same folders (each library's include root,
# src/ or the repository root, becomes include/meshtrain).
install(DIRECTORY src/ DESTINATION ${MESHTRAIN_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY io/ DESTINATION ${MESHTRAIN_INSTALL_INCLUDEDIR}/io FILES_MATCHING PATTERN "*.hpp")

install(EXPORT meshtrainTargets NAMESPACE meshtrain:: DESTINATION ${MESHTRAIN_CMAKE_INSTALL_DIR})
configure_package_config_file(share/cmake/meshtrainConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/meshtrainConfig.cmake
                              INSTALL_DESTINATION ${MESHTRAIN_CMAKE_INSTALL_DIR})
# 0.x: a minor version may change any interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshtrainConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/meshtrainConfig.cmake
              ${PROJECT_BINARY_DIR}/meshtrainConfigVersion.cmake
              share/cmake/MeshtrainKokkos.cmake
              share/cmake/MeshtrainBlas.cmake
        DESTINATION ${MESHTRAIN_CMAKE_INSTALL_DIR})

install(DIRECTORY jobs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtrain/jobs USE_SOURCE_PERMISSIONS)
# slurm/ is optional in a checkout: installed when present.
install(DIRECTORY slurm/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtrain/slurm USE_SOURCE_PERMISSIONS
        OPTIONAL)
install(DIRECTORY share/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
