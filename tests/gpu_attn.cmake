# GPU attention tests (issue 4, label "gpu"): every FP8 attention kernel of the
# build against its CPU twin and exact attention; exits 77 without a GPU.
# h3kernels is linked whole-archive: the test's weak "sm90 not available"
# stand-ins must not stop the linker from pulling in the real Hopper kernel.
if(H3_HAVE_CUDA)
  h3_test(test_gpu_attention SOURCES test_gpu_attention.c
          LIBS "$<LINK_LIBRARY:WHOLE_ARCHIVE,h3kernels>" h3cpu h3core CUDA::cudart LABELS gpu)
  target_compile_definitions(test_gpu_attention PRIVATE H3_HAVE_CUDA) # CUDA_CHECK from src/check.h
endif()
