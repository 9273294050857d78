# (named to sort after loader.cmake, which defines st_tool: areas are included in name order)
# dit_block --gpus P vs --gpus 1 (label gpu; one-device ranks always, NCCL when P GPUs are present).
if(TARGET dit_block AND TARGET gen_weights AND TARGET st_tool)
  add_test(NAME test_gpu_sp COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_sp.sh $<TARGET_FILE:dit_block>
           $<TARGET_FILE:gen_weights> $<TARGET_FILE:st_tool> ${CMAKE_CURRENT_BINARY_DIR}/gpu_block_work)
  set_tests_properties(test_gpu_sp PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu RESOURCE_LOCK gpu_block_work)
endif()
