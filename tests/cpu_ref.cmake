# CPU reference tests (issue 3): every stage against float64 references
# written in the tests, adversarial online-softmax rows, FP8 error figures.
h3_test(test_cpu_stages SOURCES test_cpu_stages.c LIBS h3cpu h3core LABELS cpu)
h3_test(test_cpu_attention SOURCES test_cpu_attention.c LIBS h3cpu h3core LABELS cpu)
