# The library's C API (include/h3block.h): every argument check on any
# machine (test_capi, against libh3block.so as a user links it); the C
# example against exact attention on a GPU (exit 77 without one); the
# installed package (cmake --install to a temporary prefix, then the example
# built against it through find_package and through pkg-config).
add_executable(test_capi test_capi.c)
target_include_directories(test_capi PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(test_capi PRIVATE h3block)
add_test(NAME test_capi COMMAND test_capi)
set_tests_properties(test_capi PROPERTIES LABELS cpu)

add_executable(example_attention ${PROJECT_SOURCE_DIR}/examples/attention.c)
target_link_libraries(example_attention PRIVATE h3block m)
if(H3_HAVE_CUDA)
  target_compile_definitions(example_attention PRIVATE H3_EXAMPLE_CUDA)
  target_link_libraries(example_attention PRIVATE CUDA::cudart)
endif()
add_test(NAME test_example_attention_gpu COMMAND example_attention)
set_tests_properties(test_example_attention_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

if(H3_SANITIZE) # a plain program cannot load an ASan-built library (the runtime must come first)
  add_test(NAME test_install COMMAND sh -c "echo 'test_install: skipped in the sanitizer build (the normal build runs it)'; exit 77")
else()
  add_test(NAME test_install COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_install.sh ${PROJECT_BINARY_DIR}
                                     ${PROJECT_SOURCE_DIR})
endif()
set_tests_properties(test_install PROPERTIES LABELS cpu SKIP_RETURN_CODE 77)

