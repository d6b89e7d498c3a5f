# Flags every weft target gets. Sanitizers and -march are decided here, once. They are host C++
# flags: CUDA sources (src/weft/kernels/cuda) get theirs from weft_cuda_flags (cmake/WeftCuda.cmake),
# since nvcc would forward -Wpedantic and -march to the host compiler for its generated code.
add_library(weft_flags INTERFACE)
target_compile_options(weft_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter -fno-math-errno>)
if(WEFT_NATIVE)
  target_compile_options(weft_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
# WEFT_TEST_CODE (a directory property that tests/CMakeLists.txt sets): the tests' own code. Under
# WEFT_SANITIZE every target gets AddressSanitizer; UBSan instruments the code under test, src/,
# and not the tests' gtest macros and fixtures, where it costs a third of the debug build's compile
# time (trainer_test: 21.6 s with both, 14.4 s with ASan alone) and would check only test code.
define_property(TARGET PROPERTY WEFT_TEST_CODE INHERITED
                BRIEF_DOCS "a test's own code: no UBSan under WEFT_SANITIZE"
                FULL_DOCS "Set on tests/ as a directory property (cmake/WeftWarnings.cmake).")
if(WEFT_SANITIZE)
  set(_src_code $<NOT:$<BOOL:$<TARGET_PROPERTY:WEFT_TEST_CODE>>>)
  target_compile_options(weft_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address -fno-omit-frame-pointer>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,${_src_code}>:-fsanitize=undefined
                                                 -fno-sanitize-recover=undefined>)
  target_link_options(weft_flags INTERFACE -fsanitize=address,undefined)
endif()

# weft_module(NAME SOURCES... DEPS ...): one static library per module. The DEPS list is the
# module's link dependencies; cmake/check_dag.cmake (a ctest) checks every #include against
# the DAG of DESIGN.md §2.
function(weft_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS;EXTERNAL" ${ARGN})
  add_library(weft_${name} ${M_SOURCES})
  target_include_directories(weft_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(weft_${name} PUBLIC weft_flags ${M_DEPS} ${M_EXTERNAL})
endfunction()
