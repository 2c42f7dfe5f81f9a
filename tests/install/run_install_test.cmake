# cmake -D SETTINGS=... -D CONSUMER_SOURCE_DIR=... -D WORK_DIR=... [-D CONFIG=...] -P run_install_test.cmake
#
# Installs the build named in SETTINGS into WORK_DIR/prefix (emptied first), checks the layout,
# configures, builds and runs the consumer project against that prefix alone (plus the build's own
# CMAKE_PREFIX_PATH, for the dependencies), and runs the installed binary's --help. Any failing
# step fails the test with the step's name; its output is above.
include("${SETTINGS}")
set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step name)
  list(JOIN ARGN " " command)
  message(STATUS "install test: ${name}: ${command}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${rc})")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})

foreach(file IN ITEMS
        bin/meshtrain
        ${LIBDIR}/cmake/meshtrain/meshtrainConfig.cmake
        ${LIBDIR}/cmake/meshtrain/meshtrainConfigVersion.cmake
        ${LIBDIR}/cmake/meshtrain/meshtrainTargets.cmake
        ${LIBDIR}/cmake/meshtrain/MeshtrainKokkos.cmake
        include/meshtrain/core/config.hpp
        include/meshtrain/io/checkpoint/file.hpp
        include/meshtrain/train/trainer.hpp
        share/meshtrain/jobs/quickstart.ini
        share/doc/meshtrain/usage.md)
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "install test: ${prefix}/${file} was not installed")
  endif()
endforeach()

# Only the prefix and the dependencies' locations: nothing points into the source or build tree.
step("configure the consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}"
     ${CONSUMER_CONFIGURE_ARGS} "-DCMAKE_PREFIX_PATH=${prefix};${CONSUMER_PREFIX_PATH}")
step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

file(GLOB_RECURSE consumer "${consumer_build}/meshtrain_consumer")
if(NOT consumer)
  message(FATAL_ERROR "install test: no meshtrain_consumer under ${consumer_build}")
endif()
if(MPIEXEC)
  set(launch "${MPIEXEC}" ${MPIEXEC_NUMPROC_FLAG} 2)
endif()
step("run the consumer" ${launch} ${consumer} "${WORK_DIR}/consumer.h5")
if(NOT step_output MATCHES "meshtrain_consumer: ok")
  message(FATAL_ERROR "install test: the consumer did not report ok")
endif()

step("installed meshtrain --help" "${prefix}/bin/meshtrain" --help)
if(NOT step_output MATCHES "usage: meshtrain <command>")
  message(FATAL_ERROR "install test: the installed meshtrain --help printed no usage")
endif()
message(STATUS "install test: passed (prefix ${prefix})")
