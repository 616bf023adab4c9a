# Helpers shared by every module's CMakeLists.

function(bigbatch_apply_flags target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(NOT target STREQUAL "bigbatch_pch")
    target_precompile_headers(${target} REUSE_FROM bigbatch_pch)
  endif()
endfunction()

# bigbatch_module(NAME SOURCES... DEPS ...): one static library per src/ folder.
function(bigbatch_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(bigbatch_${name} STATIC ${ARG_SOURCES})
  target_include_directories(bigbatch_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(bigbatch_${name} PUBLIC torch ${ARG_DEPS})
  bigbatch_apply_flags(bigbatch_${name})
endfunction()

# bigbatch_test(NAME SOURCES... DEPS ... [LABELS ...] [ONE_PROCESS_SUITES ...]): a
# GoogleTest binary registered with CTest, one CTest test per case. A suite
# named in ONE_PROCESS_SUITES is one CTest test instead, all its cases in one
# process: for a fixture whose SetUpTestSuite trains a run that every case
# reads (one process per case would train it once per case).
function(bigbatch_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS;ONE_PROCESS_SUITES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main bigbatch_malloc)
  bigbatch_apply_flags(${name})
  set(environment "BIGBATCH_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  set(filter "")
  foreach(suite ${ARG_ONE_PROCESS_SUITES})
    string(APPEND filter "${suite}.*:")
    add_test(NAME ${suite} COMMAND ${name} --gtest_filter=${suite}.*)
    set_tests_properties(${suite} PROPERTIES LABELS "${ARG_LABELS}" ENVIRONMENT "${environment}")
  endforeach()
  if(filter)
    string(REGEX REPLACE ":$" "" filter "${filter}")
    set(filter TEST_FILTER "-${filter}")
  endif()
  # Listing the tests starts the binary, which maps libtorch: on a machine
  # whose page cache is cold (a fresh clone's first ctest) that alone has
  # taken more than CMake's default 5 s.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120 ${filter}
                       PROPERTIES LABELS "${ARG_LABELS}" ENVIRONMENT "${environment}")
endfunction()
