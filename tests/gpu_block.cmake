# The whole block on the GPU vs the CPU reference (label gpu; skips without a GPU).
# test_gpu_block: tiny block, end to end (--check full) with both attention kernels.
# test_gpu_block_full: the full-size block (generates 1.29 GB in the build dir) with sampled rows.
if(TARGET dit_block AND TARGET gen_weights)
  foreach(mode tiny full)
    set(name test_gpu_block)
    if(mode STREQUAL full)
      set(name test_gpu_block_full)
    endif()
    add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_block.sh $<TARGET_FILE:dit_block>
             $<TARGET_FILE:gen_weights> ${CMAKE_CURRENT_BINARY_DIR}/gpu_block_work ${mode})
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu RESOURCE_LOCK gpu_block_work)
  endforeach()
endif()
