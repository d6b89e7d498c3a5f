# cmake -DCMD="prog;arg;..." -DEXPECT="regex1;regex2" -P expect_failure.cmake
# Passes when CMD exits non-zero AND its combined output matches every regex: the contract for bad
# input (one clear message, non-zero exit).
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit, got 0. Output:\n${all}")
endif()
foreach(re ${EXPECT})
  if(NOT all MATCHES "${re}")
    message(FATAL_ERROR "output does not match '${re}'. Output:\n${all}")
  endif()
endforeach()
message(STATUS "exit ${rc}, output as expected:\n${all}")
