# Reliability tests (issue 7, CPU side; issue 32 at the end): the fuzz
# target's checks on every fixture, a short libFuzzer smoke run, a file
# truncated under the loader, and dit_block's bad-usage / bad-file /
# non-finite handling. docs/reliability.md has the long fuzz run and what
# each bad input gets.

# The fuzz target's invariants, once per tests/data/*.safetensors (fixtures and
# saved fuzz_regress_* crashes), built with the normal compiler (and so under
# ASan/UBSan in the H3_SANITIZE build).
h3_test(test_fuzz_regress SOURCES fuzz/regress_main.c fuzz/fuzz_safetensors.c LIBS h3core
        ARGS ${CMAKE_CURRENT_SOURCE_DIR}/data LABELS cpu)

# 20000 libFuzzer executions from the tests/data seeds; exit 77 (skip) when
# clang cannot build a -fsanitize=fuzzer target here.
add_test(NAME test_fuzz_smoke COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/build_and_run.sh 20000)
set_tests_properties(test_fuzz_smoke PROPERTIES SKIP_RETURN_CODE 77 LABELS "cpu;fuzz"
                     ENVIRONMENT "FUZZ_OUT=${CMAKE_CURRENT_BINARY_DIR}/fuzz_smoke;FUZZ_NO_SAVE=1")

# A file truncated after st_open / h3_block_load: no SIGBUS, the bytes stay.
h3_test(test_truncated SOURCES test_truncated.c LIBS h3core LABELS cpu)
if(TARGET gen_weights)
  set(H3_REL_TINY ${CMAKE_CURRENT_BINARY_DIR}/reliability_tiny_weights.safetensors)
  add_test(NAME reliability_tiny_weights
           COMMAND $<TARGET_FILE:gen_weights> --config tiny --seed 5 --force --out ${H3_REL_TINY})
  set_tests_properties(reliability_tiny_weights PROPERTIES FIXTURES_SETUP rel_tiny LABELS cpu)
  set_tests_properties(test_truncated PROPERTIES FIXTURES_REQUIRED rel_tiny)
  set_property(TEST test_truncated APPEND PROPERTY ENVIRONMENT "H3_TRUNC_WEIGHTS=${H3_REL_TINY}")
endif()

# dit_block's flags and files (tiny weights made by the script itself), and
# every tool's --help, --version, --flag=value and bad flags.
if(TARGET dit_block AND TARGET gen_weights AND TARGET gen_inputs)
  set(H3_CLI_TOOLS $<TARGET_FILE:extract_block> $<TARGET_FILE:fp8_error> $<TARGET_FILE:attn_error>)
  if(TARGET bench_attn)
    list(APPEND H3_CLI_TOOLS $<TARGET_FILE:bench_attn>)
  endif()
  add_test(NAME test_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.sh $<TARGET_FILE:dit_block>
           $<TARGET_FILE:gen_weights> $<TARGET_FILE:gen_inputs> ${CMAKE_CURRENT_BINARY_DIR}/test_cli_work
           ${H3_CLI_TOOLS})
  set_tests_properties(test_cli PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
endif()

# The sm90 attention kernel's compile-time contract (no wgmma serialisation,
# no spills, every variant): needs nvcc only, no GPU, so CI runs it.
if(H3_HAVE_CUDA)
  add_test(NAME test_sm90_ptxas COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_sm90_ptxas.sh ${CMAKE_CUDA_COMPILER})
  set_tests_properties(test_sm90_ptxas PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
endif()

# The second pass (issue 32): one test per finding, each the issue's exact
# case on the tiny config (test_reliability.sh CASE; docs/reliability.md §6).
# The _gpu ones run the non-finite and same-file cases through both GPU
# runners (one GPU, and --gpus 2 --sp-one-device); they exit 77 without a GPU.
if(TARGET dit_block AND TARGET gen_weights AND TARGET gen_inputs)
  set(H3_REL_ARGS $<TARGET_FILE:dit_block> $<TARGET_FILE:gen_weights> $<TARGET_FILE:gen_inputs>)
  foreach(c fifo same_file device_output nonfinite oom sparse_header output_paths cpu_report overwrite)
    add_test(NAME test_rel_${c} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_reliability.sh ${c} ${H3_REL_ARGS}
             ${CMAKE_CURRENT_BINARY_DIR}/rel_work cpu)
    set_tests_properties(test_rel_${c} PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
  endforeach()
  foreach(c nonfinite same_file)
    add_test(NAME test_rel_${c}_gpu COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_reliability.sh ${c} ${H3_REL_ARGS}
             ${CMAKE_CURRENT_BINARY_DIR}/rel_work_gpu gpu)
    set_tests_properties(test_rel_${c}_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
  endforeach()
  if(H3_SANITIZE) # prlimit --as cannot hold AddressSanitizer's shadow memory
    set_property(TEST test_rel_oom test_rel_sparse_header APPEND PROPERTY ENVIRONMENT "H3_SANITIZED=1")
  endif()
  # Block files edited as the official safetensors library allows or refuses
  # them (its verdicts compared when H3_PYTHON has it), and names from a file
  # printed escaped.
  if(H3_STDLIB_PY)
    foreach(m official names)
      add_test(NAME test_rel_${m} COMMAND ${H3_STDLIB_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_block_files.py ${m}
               $<TARGET_FILE:dit_block> $<TARGET_FILE:gen_weights> ${CMAKE_CURRENT_BINARY_DIR}/rel_work/${m})
      set_tests_properties(test_rel_${m} PROPERTIES SKIP_RETURN_CODE 77 LABELS cpu)
    endforeach()
  endif()
endif()
