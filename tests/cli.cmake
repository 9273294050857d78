# The command-line convention and the JSON report's format, checked against
# their documents: README.md's flag lists against each tool's --help
# (tests/python/test_readme_flags.py), and a report of dit_block --cpu against
# docs/report-format.md (tests/python/test_report_format.py). Both need only
# Python's standard library. tests/test_cli.sh (reliability.cmake) covers
# each tool's --help, --version, --flag=value and bad flags.
if(TARGET dit_block AND TARGET gen_weights AND TARGET gen_inputs AND H3_STDLIB_PY)
  add_test(NAME test_readme_flags COMMAND ${H3_STDLIB_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_readme_flags.py
           ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_BINARY_DIR})
  add_test(NAME test_report_format COMMAND ${H3_STDLIB_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_report_format.py
           $<TARGET_FILE:dit_block> $<TARGET_FILE:gen_weights> $<TARGET_FILE:gen_inputs>
           ${PROJECT_SOURCE_DIR}/docs/report-format.md ${CMAKE_CURRENT_BINARY_DIR}/report_format_work)
  set_tests_properties(test_readme_flags test_report_format PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
endif()
