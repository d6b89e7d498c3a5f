# cmake -DCMD="prog;arg;..." -DEXPECT="regex1;regex2" [-DEXIT=0|nonzero] [-DMAX_SECONDS=N]
#       [-DTHEN="prog;arg;..." -DTHEN_EXPECT="regex1;..." [-DCARRY="regex(group)"]]
#       -P expect_output.cmake
# Passes when CMD's exit status is the one wanted AND its combined output matches every regex.
# EXIT=0 (the default): ctest's PASS_REGULAR_EXPRESSION alone ignores the exit code, so a command
# that printed the right text and then failed would pass. EXIT=nonzero: the contract for bad input
# (one clear message, a non-zero exit status; a crash does not count).
# THEN, if given, runs after CMD, must exit 0 and match THEN_EXPECT: a second command that reads
# what CMD wrote. CARRY's one group, a number in CMD's output, must reappear (to 1 in its last
# digit) where <carried> stands in a THEN_EXPECT regex that has no other group: THEN must show the
# value CMD reported, not some default. MAX_SECONDS: CMD must also end within that many seconds
# (a failing rank must end its whole job promptly, tests/comm).
function(expect_output cmd expect want)
  set(limit "")
  if(MAX_SECONDS)
    math(EXPR hard_limit "${MAX_SECONDS} + 30")
    set(limit TIMEOUT ${hard_limit})
  endif()
  string(TIMESTAMP start "%s" UTC)
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err ${limit})
  string(TIMESTAMP end "%s" UTC)
  math(EXPR seconds "${end} - ${start}")
  set(all "${out}${err}")
  set(all "${all}" PARENT_SCOPE)
  string(REPLACE ";" " " shown "${cmd}")
  # A crash ("Subprocess killed", a signal) is no clear failure either: it needs an exit status.
  if(want STREQUAL "nonzero" AND (rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$"))
    message(FATAL_ERROR "expected a non-zero exit status, got '${rc}' from: ${shown}\n"
                        "Output:\n${all}")
  elseif(NOT want STREQUAL "nonzero" AND NOT rc STREQUAL "0")
    message(FATAL_ERROR "expected exit 0, got '${rc}' from: ${shown}\nOutput:\n${all}")
  endif()
  if(MAX_SECONDS AND seconds GREATER_EQUAL MAX_SECONDS)
    message(FATAL_ERROR "${shown} took ${seconds} s (limit ${MAX_SECONDS} s; exit: ${rc}). "
                        "Output:\n${all}")
  endif()
  foreach(re ${expect})
    if(NOT all MATCHES "${re}")
      message(FATAL_ERROR "the output of ${shown} does not match '${re}'. Output:\n${all}")
    endif()
  endforeach()
  message(STATUS "exit ${rc}, output as expected:\n${all}")
endfunction()

# "257.25" -> 257 and 25; "267" -> 267 and "".
function(decimals int frac text)
  string(REGEX MATCH "^([0-9]+)[.]?([0-9]*)$" ignored "${text}")
  set(${int} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(${frac} "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

if(NOT DEFINED EXIT)
  set(EXIT 0)
endif()
expect_output("${CMD}" "${EXPECT}" "${EXIT}")
if(NOT THEN)
  return()
endif()
set(first "${all}")
set(number "([0-9]+[.]?[0-9]*)")
string(REPLACE "<carried>" "${number}" then_expect "${THEN_EXPECT}")
expect_output("${THEN}" "${then_expect}" 0)
if(CARRY)
  if(NOT first MATCHES "${CARRY}")
    string(REPLACE ";" " " shown "${CMD}")
    message(FATAL_ERROR "the output of ${shown} does not match '${CARRY}'")
  endif()
  set(carried "${CMAKE_MATCH_1}")
  foreach(re ${THEN_EXPECT})
    if(re MATCHES "<carried>")
      string(REPLACE "<carried>" "${number}" re "${re}")
      string(REGEX MATCH "${re}" ignored "${all}")
      # The value went through the written file (6 significant digits) and each command prints
      # it its own way (257.3, 257.2, 267): allow 1 in the last digit of the shorter one.
      decimals(a_int a_frac "${carried}")
      decimals(b_int b_frac "${CMAKE_MATCH_1}")
      string(LENGTH "${a_frac}" la)
      string(LENGTH "${b_frac}" lb)
      set(tolerance 1)
      while(la LESS lb)
        string(APPEND a_frac 0)
        math(EXPR la "${la} + 1")
        math(EXPR tolerance "${tolerance} * 10")
      endwhile()
      while(lb LESS la)
        string(APPEND b_frac 0)
        math(EXPR lb "${lb} + 1")
        math(EXPR tolerance "${tolerance} * 10")
      endwhile()
      math(EXPR diff "${a_int}${a_frac} - ${b_int}${b_frac}")
      if(diff GREATER tolerance OR diff LESS -${tolerance})
        message(FATAL_ERROR "the second command shows ${CMAKE_MATCH_1} where the first reported "
                            "${carried} ('${re}')")
      endif()
    endif()
  endforeach()
endif()
