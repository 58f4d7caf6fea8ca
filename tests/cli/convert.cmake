# kvreplay convert from the command line: the bad-input corpus in bad_requests/ and
# the real Mooncake trace. Included from tests/CMakeLists.txt.
add_test(NAME cli_convert
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_convert_tests.sh $<TARGET_FILE:kvreplay>
                 ${PROJECT_SOURCE_DIR})
