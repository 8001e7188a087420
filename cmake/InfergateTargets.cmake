# Helpers every component uses: warnings, sanitizers, test binaries with CTest labels.
include_guard(GLOBAL)

set(INFERGATE_WARNINGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)
# GCC 12 reports -Wrestrict inside libstdc++'s own std::string operator+ (char_traits::copy) at -O3
# only: a known false positive (GCC bug 105329 and related reports, still seen in 12.3). Any string
# concatenation can trip it, so it is off for that compiler rather than worked around per file.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND INFERGATE_WARNINGS -Wno-restrict)
endif()
if(INFERGATE_WERROR)
  list(APPEND INFERGATE_WARNINGS -Werror)
endif()

if(INFERGATE_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${INFERGATE_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${INFERGATE_SANITIZE})
endif()

# infergate_defaults(<target>): our warning set on the C++ sources of a target we own.
function(infergate_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${INFERGATE_WARNINGS}>)
endfunction()

# infergate_library(<name> DIR <dir> [SOURCES <file>...] [EXCLUDE <file>...] [DEPS ...] [PRIVATE_DEPS ...])
# A static library from <dir>/src/**.cc with public headers in <dir>/include. Sources are globbed so
# that adding a file never needs an edit here (and parallel work never conflicts on a source list).
# Where one folder holds a small library that a lower layer may link beside the rest (the kernels'
# formats, the model configuration the planner reads), that library names its files with SOURCES
# (relative to <dir>/src) and the folder's main library leaves them out with EXCLUDE.
# DEPS are PUBLIC (what the public headers include), PRIVATE_DEPS what only the sources use; both
# must be allowed by the layer table in docs/development.md (the `layers` test checks).
function(infergate_library name)
  cmake_parse_arguments(A "" "DIR" "SOURCES;EXCLUDE;DEPS;PRIVATE_DEPS" ${ARGN})
  if(A_SOURCES)
    list(TRANSFORM A_SOURCES PREPEND ${A_DIR}/src/ OUTPUT_VARIABLE srcs)
  else()
    file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${A_DIR}/src/*.cc)
    if(A_EXCLUDE)
      list(TRANSFORM A_EXCLUDE PREPEND ${A_DIR}/src/ OUTPUT_VARIABLE excluded)
      list(REMOVE_ITEM srcs ${excluded})
    endif()
  endif()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${A_DIR}/include PRIVATE ${A_DIR}/src)
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  infergate_defaults(${name})
endfunction()

# infergate_test(<name> LABELS <labels> SOURCES ... [LIBS ...] [TIMEOUT s])
# One GoogleTest binary; every TEST in it becomes a CTest test carrying the labels
# (unit, integration, e2e, gpu). Discovery happens when ctest runs, not at build time.
include(GoogleTest)
function(infergate_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "LABELS;SOURCES;LIBS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS} GTest::gmock GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  infergate_defaults(${name})
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
    PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
endfunction()

# ---- Fuzzing (libFuzzer) ----
# -DINFERGATE_FUZZ=ON (clang only) compiles every target with libFuzzer's coverage instrumentation and
# ASan + UBSan (UB aborts), so that a fuzzer sees inside our libraries, not just its own file.
# scripts/fuzz.sh configures such a build in its own directory.
set(INFERGATE_FUZZ_SECONDS 30 CACHE STRING "Seconds each fuzz target's CTest fuzzes (INFERGATE_FUZZ=ON)")
if(INFERGATE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "INFERGATE_FUZZ=ON needs clang: configure with -DCMAKE_C_COMPILER=clang "
                        "-DCMAKE_CXX_COMPILER=clang++ (scripts/fuzz.sh does)")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=address,undefined)
endif()

# infergate_fuzz_target(<name> SOURCES ... [LIBS ...] CORPUS <dir> [DICT <file>] [SECONDS <n>])
# The sources define `extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)`.
# With INFERGATE_FUZZ=ON: a libFuzzer binary <name> and a CTest <name> (label `fuzz`) that fuzzes for
# SECONDS (default INFERGATE_FUZZ_SECONDS) starting from the checked-in corpus. New inputs go to a
# scratch corpus in the build tree and crashes to <build>/.../<name>-crash-*: the source tree is never
# written. Every fuzz target is also a dependency of the `infergate_fuzz` target.
# Otherwise: the same sources linked with a replay main, and a CTest <name>_corpus (label `unit`)
# that runs every corpus file once, so the corpus is a regression suite in every build.
function(infergate_fuzz_target name)
  cmake_parse_arguments(A "" "CORPUS;DICT;SECONDS" "SOURCES;LIBS" ${ARGN})
  if(NOT A_CORPUS OR NOT A_SOURCES)
    message(FATAL_ERROR "infergate_fuzz_target(${name}): SOURCES and CORPUS are required")
  endif()
  if(NOT A_SECONDS)
    set(A_SECONDS ${INFERGATE_FUZZ_SECONDS})
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS})
  infergate_defaults(${name})
  if(INFERGATE_FUZZ)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set(scratch ${CMAKE_CURRENT_BINARY_DIR}/${name}-corpus)
    file(MAKE_DIRECTORY ${scratch})
    set(args -max_total_time=${A_SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
             -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/${name}-)
    if(A_DICT)
      list(APPEND args -dict=${A_DICT})
    endif()
    add_test(NAME ${name} COMMAND ${name} ${args} ${scratch} ${A_CORPUS})
    math(EXPR limit "${A_SECONDS} + 120")
    set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT ${limit})
    if(NOT TARGET infergate_fuzz)
      add_custom_target(infergate_fuzz)
    endif()
    add_dependencies(infergate_fuzz ${name})
  else()
    target_sources(${name} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/fuzz_replay_main.cc)
    add_test(NAME ${name}_corpus COMMAND ${name} ${A_CORPUS})
    set_tests_properties(${name}_corpus PROPERTIES LABELS unit TIMEOUT 120)
  endif()
endfunction()
