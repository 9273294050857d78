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

# The Python package (python/): built and installed into the test venv with
# pip, then every argument check on CPU tensors (tests/python/test_package.py;
# needs torch in H3_PYTHON, else it skips). On a GPU, against PyTorch's SDPA
# and diffusers' block (tests/python/test_gpu_package.py), with H3_TORCH_PYTHON
# (default H3_PYTHON): a Python with torch (and diffusers, safetensors for the
# block case), using this build's libh3block.so and python/src.
set(H3_TORCH_PYTHON "${H3_PYTHON}" CACHE FILEPATH "Python with torch for the package's GPU tests (empty: skip)")
if(H3_PYTHON AND TARGET gen_weights)
  add_test(NAME test_python_package COMMAND ${H3_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_package.py
           ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/python_package $<TARGET_FILE:gen_weights>)
else()
  add_test(NAME test_python_package COMMAND sh -c "echo 'test_python_package: H3_PYTHON not set, skipped'; exit 77")
endif()
set_tests_properties(test_python_package PROPERTIES SKIP_RETURN_CODE 77 LABELS "cpu;interop" TIMEOUT 900)
if(H3_TORCH_PYTHON AND TARGET gen_weights)
  add_test(NAME test_python_package_gpu COMMAND ${H3_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_gpu_package.py
           $<TARGET_FILE:gen_weights> $<TARGET_FILE:gen_inputs> ${CMAKE_CURRENT_BINARY_DIR}/python_package_gpu)
  set_tests_properties(test_python_package_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 900
    ENVIRONMENT "H3BLOCK_LIBRARY=$<TARGET_FILE:h3block>"
    ENVIRONMENT_MODIFICATION "PYTHONPATH=path_list_prepend:${PROJECT_SOURCE_DIR}/python/src")
endif()
