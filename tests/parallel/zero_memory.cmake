# cmake -DMPIRUN="mpirun;flags" -DWEFT=<weft> -DMODEL=<model.toml> -P zero_memory.cmake
# ZeRO's memory, measured against the model: `weft bench step` at dp=4 for ZeRO 0, 1, 2 and 3 on
# an 8-layer C=256 GPT (model state well above the process's other memory). Each rank's peak
# resident memory above its start must be within 10% of model::estimate_rank_memory (the
# planner's weft_rank_memory), and must fall with every stage as the model says it does.
set(previous "")
set(table "zero  predicted MiB  measured MiB  measured/predicted\n")
foreach(zero 0 1 2 3)
  execute_process(
    COMMAND ${MPIRUN} -n 4 ${WEFT} bench step --model ${MODEL} --batch 1 --seq 64
            --microbatches 2 --steps 2 --warmup 1 --threads 1 --dp 4 --zero ${zero} --json
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "zero=${zero}: exit ${rc}\n${out}${err}")
  endif()
  string(JSON predicted GET "${out}" mem_predicted_mib)
  string(JSON measured GET "${out}" mem_measured_mib)
  string(JSON ratio GET "${out}" mem_measured_over_predicted)
  string(APPEND table "${zero}     ${predicted}  ${measured}  ${ratio}\n")
  if(ratio LESS 0.9 OR ratio GREATER 1.1)
    message(FATAL_ERROR "${table}zero=${zero}: measured/predicted ${ratio} is outside [0.9, 1.1]")
  endif()
  if(NOT previous STREQUAL "" AND NOT measured LESS previous)
    message(FATAL_ERROR "${table}zero=${zero} does not use less memory than zero=${zero} - 1")
  endif()
  set(previous ${measured})
endforeach()
message(STATUS "peak memory per rank at dp=4:\n${table}")
