# weft_cli_test(NAME ARGS <weft args>... EXPECT <regex>... [FAILS] [WORKING_DIRECTORY <dir>]
#               [TIMEOUT <s>] [THEN_ARGS <weft args>... THEN_EXPECT <regex>... [CARRY <regex>]])
# One end-to-end test of the `weft` binary through expect_output.cmake: it exits 0 (non-zero with
# FAILS) AND its output matches every EXPECT regex. THEN_ARGS runs a second `weft` command after it
# (exit 0, THEN_EXPECT), e.g. the planner on the preset the first one wrote.
function(weft_cli_test name)
  cmake_parse_arguments(T "FAILS" "WORKING_DIRECTORY;TIMEOUT;CARRY"
                        "ARGS;EXPECT;THEN_ARGS;THEN_EXPECT" ${ARGN})
  set(exit 0)
  if(T_FAILS)
    set(exit nonzero)
  endif()
  set(then "")
  if(T_THEN_ARGS)
    set(then "$<TARGET_FILE:weft>;${T_THEN_ARGS}")
  endif()
  if(NOT T_WORKING_DIRECTORY)
    set(T_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  # Quoted one by one: a list here would split CMD's and EXPECT's own lists apart.
  add_test(NAME ${name} WORKING_DIRECTORY ${T_WORKING_DIRECTORY}
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:weft>;${T_ARGS}" "-DEXPECT=${T_EXPECT}"
                   "-DEXIT=${exit}" "-DTHEN=${then}" "-DTHEN_EXPECT=${T_THEN_EXPECT}"
                   "-DCARRY=${T_CARRY}" -P ${PROJECT_SOURCE_DIR}/tests/cli/expect_output.cmake)
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${T_TIMEOUT})
endfunction()
