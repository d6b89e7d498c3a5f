# Tests with any of these labels are not built (nor registered): the debug preset names the ones
# its test preset leaves out anyway (slow, heavy), which saves its build a minute of compiling.
set(WEFT_SKIP_TEST_LABELS "" CACHE STRING "Labels (a ;-list) whose tests are not built")

# weft_add_test(NAME SOURCES... DEPS... [LABELS ...]): one gtest binary per unit, registered with
# ctest under the given labels (default: unit); nothing when a label is in WEFT_SKIP_TEST_LABELS.
function(weft_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;LABELS" ${ARGN})
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
  add_test(NAME ${name} COMMAND ${name})
  # WEFT_COMM_TIMEOUT as the MPI tests': a test whose ranks are threads and one of them throws
  # leaves the others waiting for it until the timeout (the mutant pp-send-wrong-microbatch held
  # parallel_device_equivalence_test for its whole 600 s under the default 300 s per wait).
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 600
                       ENVIRONMENT
                       "OMP_NUM_THREADS=2;WEFT_COMM_TIMEOUT=120;WEFT_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
