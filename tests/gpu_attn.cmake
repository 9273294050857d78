# GPU attention tests (label "gpu"): every FP8 attention kernel of the build
# against its CPU twin and exact attention; exits 77 without a GPU. With an
# sm_90a image built (H3_BUILT_SM90A) the Hopper kernel must run on an sm_90
# device: not running is a failure. With the lab, --variant N tests a lab
# variant (lab/lab.h).
if(H3_HAVE_CUDA)
  h3_test(test_gpu_attention SOURCES test_gpu_attention.c LIBS h3kernels h3cpu h3core CUDA::cudart LABELS gpu)
  target_compile_definitions(test_gpu_attention PRIVATE H3_HAVE_CUDA) # CUDA_CHECK from runtime/cuda_check.h
  if("90a" IN_LIST H3_CUDA_ARCHS)
    target_compile_definitions(test_gpu_attention PRIVATE H3_BUILT_SM90A)
  endif()
  if(TARGET h3lab)
    target_link_libraries(test_gpu_attention PRIVATE h3lab)
  endif()
endif()
# The shape sweep of the reliability issue (S = 1..4096 over every tile
# residue, heads 1..8, S = 30271..30273 and 75600): same binary, --sweep.
if(H3_HAVE_CUDA)
  add_test(NAME test_gpu_attention_sweep COMMAND test_gpu_attention --sweep)
  set_tests_properties(test_gpu_attention_sweep PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
endif()
# The Hopper kernel's grid (which CTA does which queries; kernels/attn/
# sm90_grid.h) against a simulation of the hardware's order: plain C, CPU.
h3_test(test_sm90_grid SOURCES test_sm90_grid.c LABELS cpu)
