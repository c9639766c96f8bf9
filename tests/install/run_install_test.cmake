# run_install_test.cmake - installs scree into a scratch prefix and builds a
# small consumer against it twice: with find_package(scree) and with
# pkg-config. Run by ctest as test_install.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(prefix "${WORK}/prefix")

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install "${BIN}" --prefix "${prefix}")
foreach(f include/scree.h bin/scree-tune)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()
file(GLOB libdirs "${prefix}/lib*")
list(GET libdirs 0 libdir)
foreach(f libscree.so libscree.a cmake/scree/screeConfig.cmake cmake/scree/screeConfigVersion.cmake pkgconfig/scree.pc)
  if(NOT EXISTS "${libdir}/${f}")
    message(FATAL_ERROR "install is missing ${libdir}/${f}")
  endif()
endforeach()

# Nothing CUDA may leak into the exported interface.
file(READ "${libdir}/cmake/scree/screeTargets.cmake" targets)
file(READ "${libdir}/pkgconfig/scree.pc" pc)
file(READ "${prefix}/include/scree.h" header)
foreach(text IN ITEMS "${targets}" "${pc}")
  if(text MATCHES "cuda|nvrtc|CUDA")
    message(FATAL_ERROR "the exported interface mentions CUDA:\n${text}")
  endif()
endforeach()
if(header MATCHES "#include <cuda")
  message(FATAL_ERROR "scree.h includes a CUDA header")
endif()

# A library built with sanitizers (SCREE_SANITIZE) needs their runtime first
# in the program: the consumers are built with the same -fsanitize.
set(san_flags "")
if(SANITIZE)
  set(san_flags "-fsanitize=${SANITIZE}")
endif()

# 1. CMake consumer.
run(${CMAKE_COMMAND} -S "${SRC}/tests/install/consumer" -B "${WORK}/consumer-build"
    -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_FLAGS=${san_flags}")
run(${CMAKE_COMMAND} --build "${WORK}/consumer-build")
run("${WORK}/consumer-build/consumer")
if(NOT LAST_OUT MATCHES "scree 0\\.")
  message(FATAL_ERROR "consumer printed: ${LAST_OUT}")
endif()

# 2. pkg-config consumer, plain cc.
find_program(PKG_CONFIG pkg-config)
find_program(CC NAMES cc gcc clang)
if(PKG_CONFIG AND CC)
  set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
  run(${PKG_CONFIG} --cflags --libs scree)
  string(STRIP "${LAST_OUT}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(${CC} -std=c11 -Wall -Werror ${san_flags} "${SRC}/tests/install/consumer/consumer.c" ${flags}
      "-Wl,-rpath,${libdir}" -o "${WORK}/consumer-pc")
  run("${WORK}/consumer-pc")
  if(NOT LAST_OUT MATCHES "scree 0\\.")
    message(FATAL_ERROR "pkg-config consumer printed: ${LAST_OUT}")
  endif()
endif()
message(STATUS "install test passed")
