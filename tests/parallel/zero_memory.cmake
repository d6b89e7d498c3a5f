# cmake -DMPIRUN="mpirun;flags" -DWEFT=<weft> -DWORK=<dir> -P zero_memory.cmake
# ZeRO's memory, measured against the model, on a GPT the model was not developed on (pipe-8l and
# GPT-2 124M were; docs/planner.md §5; it has no fitted constant): 3 layers, C=192, a 30,000-token
# vocabulary, so the tied embedding (22 MiB) outweighs the layers (1.7 MiB each) and its
# reduce-scatter's temporaries (44 MiB on the busiest rank) are mapped and returned per call, while
# the layers' stay on the heap. `weft bench step` at dp=4 for ZeRO 0, 1, 2 and 3: each rank's peak
# resident memory above its start against model::estimate_rank_memory (the planner's
# weft_rank_memory), and the stages' order. Here ZeRO 1 and 2 need MORE than ZeRO 0 (the
# reduce-scatter's temporaries outweigh what they shard), and the model must say so.
# "133.83203125" -> 133832 (thousandths, truncated): CMake's math() has integers only.
function(to_thousandths value out)
  string(REGEX MATCH "^-?([0-9]+)(\\.([0-9]*))?$" m "${value}")
  string(SUBSTRING "${CMAKE_MATCH_3}000" 0 3 frac)
  math(EXPR v "${CMAKE_MATCH_1} * 1000 + ${frac}")
  set(${out} ${v} PARENT_SCOPE)
endfunction()

file(WRITE ${WORK}/zero-unseen.toml
     "[model]\nname = \"zero-unseen\"\nn_layer = 3\nn_embd = 192\nn_head = 3\n"
     "vocab_size = 30000\npad_vocab_to = 128\nmax_seq_len = 128\n")
set(table "zero  predicted MiB  measured MiB  measured/predicted\n")
foreach(zero 0 1 2 3)
  execute_process(
    COMMAND ${MPIRUN} -n 4 ${WEFT} bench step --model ${WORK}/zero-unseen.toml --batch 1 --seq 64
            --microbatches 2 --steps 2 --warmup 1 --threads 1 --dp 4 --zero ${zero} --json
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "zero=${zero}: exit ${rc}\n${out}${err}")
  endif()
  string(JSON predicted${zero} GET "${out}" mem_predicted_mib)
  string(JSON measured${zero} GET "${out}" mem_measured_mib)
  string(JSON ratio GET "${out}" mem_measured_over_predicted)
  string(APPEND table "${zero}     ${predicted${zero}}  ${measured${zero}}  ${ratio}\n")
  # Measured 0.998-1.003 (2026-12-01, ZeRO 2/3's units in the unit pool, its buffers rounded to
  # huge pages in the model); 0.956-0.998 before, when the model first counted the process's
  # runtime (oneDNN's JIT kernels and code pages, 7.5 MiB; 1.012-1.064 without it).
  # The model this replaced (a reduce-scatter's temporaries fitted as 3 copies of the two largest
  # units, every transient term added as if at once) gave 0.75-0.94 here.
  if(ratio LESS 0.90 OR ratio GREATER 1.10)
    message(FATAL_ERROR "${table}zero=${zero}: measured/predicted ${ratio} is outside [0.90, 1.10]")
  endif()
endforeach()
# The stages in the order the model puts them: every pair it predicts at least 10 MiB apart must
# measure in that order (measured gaps of such pairs: 11-27 MiB; a rerun moves a stage by up to
# 3 MiB). The replaced model put ZeRO 3 26 MiB above ZeRO 0; it measures 7 MiB below.
foreach(zero 0 1 2 3)
  to_thousandths(${measured${zero}} m${zero})
  to_thousandths(${predicted${zero}} p${zero})
endforeach()
foreach(a 0 1 2)
  math(EXPR first "${a} + 1")
  foreach(b RANGE ${first} 3)
    math(EXPR dp "${p${a}} - ${p${b}}")
    math(EXPR dm "${m${a}} - ${m${b}}")
    if((dp GREATER_EQUAL 10000 AND dm LESS_EQUAL 0) OR (dp LESS_EQUAL -10000 AND dm GREATER_EQUAL 0))
      message(FATAL_ERROR "${table}zero=${a} - zero=${b}: predicted ${dp}, measured ${dm} "
                          "(1/1000 MiB): the model orders these stages wrongly")
    endif()
  endforeach()
endforeach()
message(STATUS "peak memory per rank at dp=4:\n${table}")
