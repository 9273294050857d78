# CPU reference tests (issue 3): every stage against float64 references
# written in the tests, adversarial online-softmax rows, FP8 error figures.
h3_test(test_cpu_stages SOURCES test_cpu_stages.c LIBS h3cpu h3core LABELS cpu)
h3_test(test_cpu_attention SOURCES test_cpu_attention.c LIBS h3cpu h3core LABELS cpu)
# The stage checker's FP8 GEMM checks (app/checker.c) on the host, both scale granularities.
h3_test(test_checker_fp8 SOURCES test_checker_fp8.c ${PROJECT_SOURCE_DIR}/app/checker.c ${PROJECT_SOURCE_DIR}/app/report.c
        LIBS h3cpu h3core LABELS cpu)
target_include_directories(test_checker_fp8 PRIVATE ${PROJECT_SOURCE_DIR}/app)
# tools/fp8_error (the FP8 GEMM error, GEMM by GEMM) on the tiny block.
if(TARGET fp8_error AND TARGET gen_weights)
  add_test(NAME test_fp8_error COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_fp8_error.sh $<TARGET_FILE:fp8_error>
           $<TARGET_FILE:gen_weights> ${CMAKE_CURRENT_BINARY_DIR}/fp8_error_work)
  set_tests_properties(test_fp8_error PROPERTIES LABELS cpu)
endif()
# tools/attn_error (the FP8 attention contract's error, operand by operand).
if(TARGET attn_error)
  add_test(NAME test_attn_error COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_attn_error.sh $<TARGET_FILE:attn_error>)
  set_tests_properties(test_attn_error PROPERTIES LABELS cpu)
endif()
