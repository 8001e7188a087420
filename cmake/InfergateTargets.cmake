# Helpers every component uses: warnings, sanitizers, test binaries with CTest labels.
include_guard(GLOBAL)

set(INFERGATE_WARNINGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)
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

# infergate_library(<name> DIR <dir> [DEPS ...] [PRIVATE_DEPS ...])
# A static library from <dir>/src/**.cc with public headers in <dir>/include. Sources are globbed so
# that adding a file never needs an edit here (and parallel work never conflicts on a source list).
function(infergate_library name)
  cmake_parse_arguments(A "" "DIR" "DEPS;PRIVATE_DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${A_DIR}/src/*.cc)
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
