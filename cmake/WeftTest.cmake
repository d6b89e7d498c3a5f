# Tests with any of these labels are not built (nor registered): the debug preset names the ones
# its test preset leaves out anyway (slow, heavy), which saves its build a minute of compiling.
set(WEFT_SKIP_TEST_LABELS "" CACHE STRING "Labels (a ;-list) whose tests are not built")

# weft_add_test(NAME SOURCES... DEPS... [LABELS ...] [THREADS N] [SLOW_CASES FILTER]): one gtest
# binary per unit, registered with ctest under the given labels (default: unit); nothing when a
# label is in WEFT_SKIP_TEST_LABELS. THREADS: its OMP_NUM_THREADS (default 2; 1 for a test whose
# ranks are threads, which keep the cores busy already). SLOW_CASES: a gtest filter of cases that
# run as a second ctest entry, NAME_slow_cases, labelled slow as well (so the debug preset leaves
# them out): sweeps whose code the unit's other cases run under the sanitizers too.
function(weft_add_test name)
  cmake_parse_arguments(T "" "THREADS;SLOW_CASES" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT T_THREADS)
    set(T_THREADS 2)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  foreach(label ${T_LABELS})
    if(label IN_LIST WEFT_SKIP_TEST_LABELS)
      return()
    endif()
  endforeach()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE WEFT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_precompile_headers(${name} REUSE_FROM weft_test_pch)  # tests/support/CMakeLists.txt
  set(entries ${name})
  if(T_SLOW_CASES)
    add_test(NAME ${name} COMMAND ${name} --gtest_filter=-${T_SLOW_CASES})
    add_test(NAME ${name}_slow_cases COMMAND ${name} --gtest_filter=${T_SLOW_CASES})
    set_tests_properties(${name}_slow_cases PROPERTIES LABELS "${T_LABELS};slow")
    list(APPEND entries ${name}_slow_cases)
  else()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
  # WEFT_COMM_TIMEOUT as the MPI tests': a test whose ranks are threads and one of them throws
  # leaves the others waiting for it until the timeout (the mutant pp-send-wrong-microbatch held
  # parallel_device_equivalence_test for its whole 600 s under the default 300 s per wait).
  set_tests_properties(${entries} PROPERTIES TIMEOUT 600 ENVIRONMENT
                       "OMP_NUM_THREADS=${T_THREADS};WEFT_COMM_TIMEOUT=120;WEFT_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
