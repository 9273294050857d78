# Safetensors loader/writer tests (label "cpu") and the interop tests against
# code we did not write: the official safetensors package and ml_dtypes; also
# tools/bench/compare_outputs.py's figures against numpy.
h3_test(test_safetensors SOURCES test_safetensors.c LIBS h3core ARGS ${CMAKE_CURRENT_SOURCE_DIR}/data LABELS cpu)

# Helpers the Python tests drive (built with the tests, not tests themselves).
foreach(tool st_tool fp8_tool)
  add_executable(${tool} ${tool}.c)
  target_include_directories(${tool} PRIVATE ${PROJECT_SOURCE_DIR}/core)
  target_link_libraries(${tool} PRIVATE h3core)
endforeach()

# H3_PYTHON: a python with safetensors, numpy and ml_dtypes (a venv); the
# scripts exit 77 (skip) when a module is missing, and so do these tests
# when H3_PYTHON is empty.
set(H3_PYTHON "" CACHE FILEPATH "Python with safetensors, numpy, ml_dtypes for the interop tests (empty: skip them)")
set(H3_PY_TESTS
  "test_st_fixtures_official\;check_fixtures.py\;${CMAKE_CURRENT_SOURCE_DIR}/data"
  "test_st_interop\;test_st_interop.py\;$<TARGET_FILE:st_tool>\;${CMAKE_CURRENT_SOURCE_DIR}/data\;${CMAKE_CURRENT_BINARY_DIR}"
  "test_fp8_ml_dtypes\;test_fp8_ml_dtypes.py\;$<TARGET_FILE:fp8_tool>\;${CMAKE_CURRENT_BINARY_DIR}"
  "test_compare_outputs\;test_compare_outputs.py\;${PROJECT_SOURCE_DIR}/tools/bench/compare_outputs.py\;${CMAKE_CURRENT_BINARY_DIR}/compare_outputs")
foreach(spec IN LISTS H3_PY_TESTS)
  list(POP_FRONT spec name script)
  if(H3_PYTHON)
    add_test(NAME ${name} COMMAND ${H3_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/${script} ${spec}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  else()
    add_test(NAME ${name} COMMAND sh -c "echo '${name}: H3_PYTHON not set, skipped'; exit 77")
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "cpu;interop")
endforeach()

# Every published checkpoint layout, written by the official safetensors
# package, gives dit_block the canonical block's output; gen_weights --layout
# and extract_block against the same files (tests/python/test_layouts.py).
if(TARGET dit_block AND TARGET gen_weights AND TARGET extract_block)
  if(H3_PYTHON)
    add_test(NAME test_layouts COMMAND ${H3_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_layouts.py
             $<TARGET_FILE:dit_block> $<TARGET_FILE:gen_weights> $<TARGET_FILE:extract_block>
             ${CMAKE_CURRENT_BINARY_DIR}/layouts_work)
  else()
    add_test(NAME test_layouts COMMAND sh -c "echo 'test_layouts: H3_PYTHON not set, skipped'; exit 77")
  endif()
  set_tests_properties(test_layouts PROPERTIES SKIP_RETURN_CODE 77 LABELS "cpu;interop")
endif()

# dit_block on every malformed fixture: non-zero exit, the loader's message on stderr.
if(TARGET dit_block AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/cli_bad_files.sh)
  add_test(NAME test_cli_bad_files COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_bad_files.sh $<TARGET_FILE:dit_block>
           ${CMAKE_CURRENT_SOURCE_DIR}/data)
  set_tests_properties(test_cli_bad_files PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
endif()
