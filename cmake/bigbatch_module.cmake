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

# bigbatch_test(NAME SOURCES... DEPS ... [LABELS ...]): a GoogleTest binary
# registered with CTest, one CTest test per suite, named after it, its cases
# in one process (cmake/gtest_suites.cmake says why). The suites are listed
# when CTest starts (as gtest_discover_tests's PRE_TEST mode does), so a
# rebuilt binary's new suites need no new configure. Suite names must be
# unique across the binaries (CTest's test names): a parameterised suite's
# instantiation prefix tells two binaries' apart.
function(bigbatch_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} bigbatch_gtest_main GTest::gtest bigbatch_malloc)
  bigbatch_apply_flags(${name})
  set(suites_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_include.cmake")
  file(GENERATE OUTPUT "${include_file}" CONTENT
"set(BINARY [=[$<TARGET_FILE:${name}>]=])
set(NAME [=[${name}]=])
set(LABELS [=[${ARG_LABELS}]=])
set(ENVIRONMENT [=[BIGBATCH_SOURCE_DIR=${PROJECT_SOURCE_DIR}]=])
set(CTEST_OUT [=[${suites_file}]=])
set(LISTER [=[${PROJECT_SOURCE_DIR}/cmake/gtest_suites.cmake]=])
# Listed again when the binary, this file (labels, environment) or the
# lister changed since the last list.
if(NOT EXISTS \"\${CTEST_OUT}\" OR NOT EXISTS \"\${BINARY}\" OR \"\${BINARY}\" IS_NEWER_THAN \"\${CTEST_OUT}\"
   OR \"\${CMAKE_CURRENT_LIST_FILE}\" IS_NEWER_THAN \"\${CTEST_OUT}\" OR \"\${LISTER}\" IS_NEWER_THAN \"\${CTEST_OUT}\")
  include(\"\${LISTER}\")
endif()
include(\"\${CTEST_OUT}\")
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
