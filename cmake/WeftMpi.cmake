# MPI for the comm_mpi backend and the MPI tests (DESIGN.md §6). Open MPI from Debian
# (openmpi-bin, libopenmpi-dev; scripts/bootstrap.sh installs them).
#
# WEFT_MPIEXEC_FLAGS: what every mpirun of ours gets (ctest and scripts alike): oversubscription
# (more ranks than cores), loopback transports only, and --allow-run-as-root when CMake runs as
# root. WEFT_MPIRUN is the command prefix `mpirun <flags>`; append `-n N prog args...`.
#
# weft_add_mpi_test(NAME SOURCES... DEPS... RANKS n... [LABELS ...]): one gtest binary (with the
# shared MPI test main, tests/support/mpi_test_main.cc) registered as ctests NAME_np<n>, one per
# rank count, labelled "mpi" plus LABELS.

# The deprecated MPI C++ bindings are not used; only the C API.
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Skip the MPI C++ bindings")
find_package(MPI REQUIRED COMPONENTS CXX)

execute_process(COMMAND id -u OUTPUT_VARIABLE _weft_uid OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
set(_weft_mpiexec_flags --oversubscribe --mca btl self,vader)
if(_weft_uid STREQUAL "0" OR "$ENV{USER}" STREQUAL "root")
  list(APPEND _weft_mpiexec_flags --allow-run-as-root)
endif()
set(WEFT_MPIEXEC_FLAGS "${_weft_mpiexec_flags}" CACHE STRING
    "Flags for every mpirun of weft's (a ;-list): tests, scripts, the CLI test")
set(WEFT_MPIRUN ${MPIEXEC_EXECUTABLE} ${WEFT_MPIEXEC_FLAGS})
set_property(GLOBAL PROPERTY WEFT_MPIRUN "${WEFT_MPIRUN}")
set(WEFT_MPI_TEST_TIMEOUT 300)

# The environment of every MPI test: one OpenMP thread per rank (ranks share the cores), and a
# communication timeout well under ctest's, so a test that hangs on a peer fails with a message
# naming the op and group instead of being killed silently.
set(WEFT_MPI_TEST_ENVIRONMENT
    "OMP_NUM_THREADS=1;WEFT_COMM_TIMEOUT=120;WEFT_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
if(WEFT_SANITIZE)
  # Open MPI keeps allocations alive until exit. Suppress them by module: keep its components
  # loaded (no dlclose) and unwind fully, so every leak's stack names the library it comes from.
  list(APPEND WEFT_MPI_TEST_ENVIRONMENT
       "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0"
       "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/support/lsan_mpi.supp:print_suppressions=0"
       "OMPI_MCA_mca_base_component_disable_dlclose=1")
endif()

function(weft_add_mpi_test name)
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;RANKS;LABELS" ${ARGN})
  if(NOT T_RANKS)
    message(FATAL_ERROR "weft_add_mpi_test(${name}): RANKS is required")
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} weft_mpi_test_main GTest::gtest)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE WEFT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_precompile_headers(${name} REUSE_FROM weft_test_pch)  # tests/support/CMakeLists.txt
  foreach(n ${T_RANKS})
    add_test(NAME ${name}_np${n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${WEFT_MPIEXEC_FLAGS}
                     $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_np${n} PROPERTIES LABELS "mpi;${T_LABELS}"
                         TIMEOUT ${WEFT_MPI_TEST_TIMEOUT} PROCESSORS ${n}
                         ENVIRONMENT "${WEFT_MPI_TEST_ENVIRONMENT}")
  endforeach()
endfunction()
