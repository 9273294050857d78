# GPU kernels (kernels/*.cu except attention) and the cuBLASLt wrapper against
# their CPU twins in cpu_ref/. Exits 77 without a usable GPU.
if(H3_HAVE_CUDA)
  h3_test(test_gpu_ops
    SOURCES test_gpu_ops.c ${PROJECT_SOURCE_DIR}/runtime/gemm_lt.c
    LIBS h3cpu h3kernels h3core CUDA::cublasLt CUDA::cudart
    LABELS gpu)
  target_compile_definitions(test_gpu_ops PRIVATE H3_HAVE_CUDA H3_HAVE_CUBLASLT)
  target_include_directories(test_gpu_ops PRIVATE ${PROJECT_SOURCE_DIR}/runtime)
endif()
