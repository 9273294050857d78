# GPU attention tests (issue 4, label "gpu"): every FP8 attention kernel of the
# build against its CPU twin and exact attention; exits 77 without a GPU.
# h3kernels is linked whole-archive: the test's weak "sm90 not available"
# stand-ins must not stop the linker from pulling in the real Hopper kernel.
if(H3_HAVE_CUDA)
  h3_test(test_gpu_attention SOURCES test_gpu_attention.c
          LIBS "$<LINK_LIBRARY:WHOLE_ARCHIVE,h3kernels>" h3cpu h3core CUDA::cudart LABELS gpu)
  target_compile_definitions(test_gpu_attention PRIVATE H3_HAVE_CUDA) # CUDA_CHECK from src/check.h
endif()
# The shape sweep of the reliability issue (S = 1..4096 over every tile
# residue, heads 1..8, S = 30271..30273 and 75600): same binary, --sweep.
if(H3_HAVE_CUDA)
  add_test(NAME test_gpu_attention_sweep COMMAND test_gpu_attention --sweep)
  set_tests_properties(test_gpu_attention_sweep PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
endif()
