# Project-wide helpers: warnings, sanitizers, library and test declarations.

option(ANTDT_WERROR "Treat warnings as errors" OFF)
set(ANTDT_SANITIZE "" CACHE STRING
  "address: AddressSanitizer + UndefinedBehaviorSanitizer; thread: ThreadSanitizer; empty: none")

set(ANTDT_WARNINGS -Wall -Wextra -Wshadow)
if(ANTDT_WERROR)
  list(APPEND ANTDT_WARNINGS -Werror)
endif()
if(ANTDT_SANITIZE MATCHES "^(address|ON)$")
  set(ANTDT_SANITIZE_FLAGS -fsanitize=address,undefined)
elseif(ANTDT_SANITIZE STREQUAL "thread")
  # -U__SANITIZE_THREAD__: the headers of Debian's protobuf, gRPC and abseil
  # must be read as their uninstrumented libraries were built. Otherwise
  # protobuf's MapFieldBase gains two counters under TSan, the library's code
  # reads the fields at other offsets, and a map field on an arena crashes.
  # Instrumentation comes from -fsanitize=thread, not from the macro.
  set(ANTDT_SANITIZE_FLAGS -fsanitize=thread)
  set(ANTDT_SANITIZE_DEFINES -U__SANITIZE_THREAD__)
elseif(ANTDT_SANITIZE)
  message(FATAL_ERROR "ANTDT_SANITIZE: must be address, thread or empty, not '${ANTDT_SANITIZE}'")
endif()
if(ANTDT_SANITIZE_FLAGS)
  add_compile_options(${ANTDT_SANITIZE_FLAGS} ${ANTDT_SANITIZE_DEFINES} -fno-omit-frame-pointer)
  add_link_options(${ANTDT_SANITIZE_FLAGS})
endif()

# antdt_library(NAME SRCS ... DEPS ...)
function(antdt_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE ${ANTDT_WARNINGS})
endfunction()

# antdt_binary(NAME SRCS ... DEPS ...)
function(antdt_binary name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_compile_options(${name} PRIVATE ${ANTDT_WARNINGS})
endfunction()

# antdt_test(NAME SRCS ... DEPS ... LABELS ... [TIMEOUT s] [SPLIT])
# Labels: unit (seconds, no processes), integration (real binaries, each under
# about 20 s), e2e (the long end-to-end runs), tsan (also run under ThreadSanitizer
# by scripts/sanitize.sh). Target tests-LABEL builds every test with LABEL (and,
# through its add_dependencies, the binaries it launches) in parallel.
# SPLIT: one ctest test per TEST() in SRCS, named NAME.Suite.Case (each its own
# process, TIMEOUT each), so that `ctest -j` runs a long binary's cases side by
# side; `ctest -R NAME` still selects them all. CASES Suite.Case ...: with SPLIT,
# only those cases (the others are registered elsewhere, e.g. on another backend).
include(GoogleTest)
function(antdt_test name)
  cmake_parse_arguments(ARG "SPLIT" "TIMEOUT" "SRCS;DEPS;LABELS;CASES" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${ANTDT_WARNINGS})
  if(ARG_SPLIT AND ARG_CASES)
    set(tests "")
    foreach(case IN LISTS ARG_CASES)
      add_test(NAME ${name}.${case} COMMAND ${name} --gtest_filter=${case})
      list(APPEND tests ${name}.${case})
    endforeach()
  elseif(ARG_SPLIT)
    gtest_add_tests(TARGET ${name} SOURCES ${ARG_SRCS} TEST_PREFIX "${name}." TEST_LIST tests)
  else()
    add_test(NAME ${name} COMMAND ${name})
    set(tests ${name})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set_tests_properties(${tests} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "ANTDT_BIN_DIR=${CMAKE_BINARY_DIR}/bin;ANTDT_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  foreach(label IN LISTS ARG_LABELS)
    if(NOT TARGET tests-${label})
      add_custom_target(tests-${label})
    endif()
    add_dependencies(tests-${label} ${name})
  endforeach()
endfunction()

# antdt_control_plane_test(NAME TIMEOUT s COMMAND ...): a test on the real control
# plane (testing/control-plane), labelled integration; it exits 77 (SKIPPED, naming
# what is missing) where scripts/build-k8s.sh has not built it. Extra ENVIRONMENT
# entries are added to PYTHONDONTWRITEBYTECODE=1. WORKING_DIRECTORY as add_test's.
function(antdt_control_plane_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;WORKING_DIRECTORY" "COMMAND;ENVIRONMENT" ${ARGN})
  if(ARG_WORKING_DIRECTORY)
    add_test(NAME ${name} COMMAND ${ARG_COMMAND} WORKING_DIRECTORY ${ARG_WORKING_DIRECTORY})
  else()
    add_test(NAME ${name} COMMAND ${ARG_COMMAND})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS integration TIMEOUT ${ARG_TIMEOUT}
    SKIP_RETURN_CODE 77 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;${ARG_ENVIRONMENT}")
endfunction()
