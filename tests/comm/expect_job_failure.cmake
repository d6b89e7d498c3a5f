# cmake -DCMD="mpirun;...;prog" -DEXPECT="regex1;regex2" -DMAX_SECONDS=30 -P expect_job_failure.cmake
# Passes when the job CMD exits non-zero, its combined output matches every regex, and it ended
# within MAX_SECONDS: a failing rank must end the whole job promptly, with its message (the
# approach of tests/cli/expect_failure.cmake, plus the clock).
string(TIMESTAMP start "%s" UTC)
math(EXPR hard_limit "${MAX_SECONDS} + 30")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${hard_limit})
string(TIMESTAMP end "%s" UTC)
math(EXPR seconds "${end} - ${start}")
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit, got 0. Output:\n${all}")
endif()
if(seconds GREATER_EQUAL MAX_SECONDS)
  message(FATAL_ERROR "the job took ${seconds} s (limit ${MAX_SECONDS} s; exit: ${rc}). "
                      "Output:\n${all}")
endif()
foreach(re ${EXPECT})
  if(NOT all MATCHES "${re}")
    message(FATAL_ERROR "output does not match '${re}'. Output:\n${all}")
  endif()
endforeach()
message(STATUS "exit ${rc} after ${seconds} s, output as expected:\n${all}")
