# The command-line convention, checked against its document: README.md's flag
# lists against each tool's --help (tests/python/test_readme_flags.py; only
# Python's standard library). tests/test_cli.sh (reliability.cmake) covers
# each tool's --help, --version, --flag=value and bad flags.
if(TARGET dit_block AND TARGET gen_weights AND TARGET gen_inputs AND H3_STDLIB_PY)
  add_test(NAME test_readme_flags COMMAND ${H3_STDLIB_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_readme_flags.py
           ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_BINARY_DIR})
  set_tests_properties(test_readme_flags PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
endif()
