# The benchmark tools' analysis scripts (label "cpu"): tools/bench/scaling_fit.py
# (the fit behind docs/perf.md's fixed-cost figures) on times made from known
# parts; standard library only.
if(H3_STDLIB_PY)
  add_test(NAME test_scaling_fit COMMAND ${H3_STDLIB_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_scaling_fit.py
           ${PROJECT_SOURCE_DIR}/tools/bench/scaling_fit.py ${CMAKE_CURRENT_BINARY_DIR}/scaling_fit_work)
  set_tests_properties(test_scaling_fit PROPERTIES LABELS "cpu")
endif()
