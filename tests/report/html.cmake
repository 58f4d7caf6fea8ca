# The HTML report: unit tests, and the pages rendered in headless Chromium
# (skipped, exit 77, when chromium is not installed). Included from
# tests/CMakeLists.txt.
add_executable(html_tests ${CMAKE_CURRENT_LIST_DIR}/html_test.cc
                          ${CMAKE_CURRENT_LIST_DIR}/duration_text_test.cc)
target_link_libraries(html_tests PRIVATE kvreplay_report kvreplay_test_main Catch2::Catch2
                                         kvreplay_warnings)
target_compile_definitions(html_tests PRIVATE KVREPLAY_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
kvreplay_catch_tests(html_tests "report:")

add_executable(png_pixels ${CMAKE_CURRENT_LIST_DIR}/png_pixels.cc)
target_link_libraries(png_pixels PRIVATE ZLIB::ZLIB kvreplay_warnings)
add_test(NAME html_report_browser
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_html_browser_test.sh $<TARGET_FILE:kvreplay>
                 $<TARGET_FILE:png_pixels> ${PROJECT_SOURCE_DIR})
set_tests_properties(html_report_browser PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)

# Reports of a trace whose file name is not UTF-8 (found by hand, hostile inputs).
add_test(NAME report_non_utf8_file_name
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_non_utf8_name_test.sh $<TARGET_FILE:kvreplay>
                 ${PROJECT_SOURCE_DIR})
