# kvreplay convert from the command line: the bad-input corpus in bad_requests/ and
# the real Mooncake trace. Included from tests/CMakeLists.txt.
add_test(NAME cli_convert
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_convert_tests.sh $<TARGET_FILE:kvreplay>
                 ${PROJECT_SOURCE_DIR})
# Users get told what to do: replay on a request trace names simulate, a trace out
# of order gets the convert --sort line, durations in the summary have units, and the
# README's files exist (its gate example runs).
add_test(NAME cli_guidance
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_guidance_tests.sh $<TARGET_FILE:kvreplay>
                 ${PROJECT_SOURCE_DIR})
