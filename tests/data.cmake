# The H3 block as data (issue 2): block loader, inputs, generators, extractor.
# All CPU-only; fixtures are generated at test time into the build's tests dir.
h3_test(test_block SOURCES test_block.c LIBS h3core ARGS $<TARGET_FILE:gen_weights> LABELS cpu)
add_dependencies(test_block gen_weights)

h3_test(test_inputs SOURCES test_inputs.c LIBS h3core LABELS cpu)

h3_test(test_extract SOURCES test_extract.c LIBS h3core
        ARGS $<TARGET_FILE:gen_weights> $<TARGET_FILE:extract_block> LABELS cpu)
add_dependencies(test_extract gen_weights extract_block)

# Generator determinism and flag errors (a shell script; run it alone with
#   sh tests/test_generators.sh build/tools/gen_weights build/tools/gen_inputs).
add_test(NAME test_generators
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_generators.sh $<TARGET_FILE:gen_weights> $<TARGET_FILE:gen_inputs>
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(test_generators PROPERTIES LABELS cpu)
