# The layers' include directions and no lab vocabulary in production code
# (tests/test_layers.sh; plain text, runs everywhere).
add_test(NAME test_layers COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_layers.sh)
set_tests_properties(test_layers PROPERTIES LABELS cpu)
