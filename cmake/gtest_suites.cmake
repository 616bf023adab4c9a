# Run by CTest before the tests (a TEST_INCLUDE_FILES script that
# bigbatch_test() generates per binary): lists the binary's GoogleTest cases
# and adds one CTest test per suite, named after it, that runs the suite's
# cases in one process (--gtest_filter=SUITE.*).
#
# Why per suite and not per case (CMake's gtest_discover_tests): every
# process maps libtorch first, ~0.4 s, and most cases take milliseconds.
# On a 2-core Xeon guest (2026-12-07) the unit label took 184 s as 368
# processes, 53 s as 73; the GoogleTest half of the integration label about
# 150 s, then 101 s. The suite keeps its name, so `ctest -R Resume` still
# picks it; gtest's output names each failed case.
#
# Variables (set by the generated script): BINARY, NAME (the binary's
# target), LABELS, ENVIRONMENT (NAME=VALUE), CTEST_OUT (the file to write).
if(NOT EXISTS "${BINARY}")
  file(WRITE "${CTEST_OUT}"
       "add_test([=[${NAME}_NOT_BUILT]=] [=[${NAME}_NOT_BUILT]=])\n"
       "set_tests_properties([=[${NAME}_NOT_BUILT]=] PROPERTIES LABELS [=[${LABELS}]=])\n")
  return()
endif()
# Listing maps libtorch: on a cold page cache (a fresh clone's first ctest)
# that alone has taken more than 5 s.
execute_process(COMMAND "${BINARY}" --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE listing_err RESULT_VARIABLE rc
                TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${rc}): ${listing_err}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line IN LISTS lines)
  # A suite's line starts in column 0 and ends in '.', before an optional
  # "  # TypeParam = ..." comment; its cases follow, indented.
  if(line MATCHES "^([^ #][^ ]*)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND content
           "add_test([=[${suite}]=] [=[${BINARY}]=] [=[--gtest_filter=${suite}.*]=])\n"
           "set_tests_properties([=[${suite}]=] PROPERTIES LABELS [=[${LABELS}]=]"
           " ENVIRONMENT [=[${ENVIRONMENT}]=] SKIP_RETURN_CODE 77)\n")
  endif()
endforeach()
if(content STREQUAL "")
  message(FATAL_ERROR "${BINARY} lists no GoogleTest suite")
endif()
file(WRITE "${CTEST_OUT}" "${content}")
