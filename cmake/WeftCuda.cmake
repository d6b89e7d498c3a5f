# CUDA discovery (issue #8; docs/cuda.md). WEFT_CUDA builds src/weft/kernels/cuda (the library
# weft_kernels_cuda), src/weft/comm/cuda (weft_comm_cuda: communicators on device buffers, with
# NCCL when it is found), their tests (label `cuda`, skipped at run time where no GPU is visible)
# and the kernel benchmark bench/gpu. It is ON by default when nvcc is found (CMAKE_CUDA_COMPILER
# if given, else nvcc on the PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin), OFF otherwise;
# nothing outside those libraries depends on it, so the rest of the build is the same either way.
#
# WEFT_CUDA_ARCHS: the CUDA architectures to compile for, in CMAKE_CUDA_ARCHITECTURES form.
# Default 90a: the H100/H200 with its Hopper-only instructions. One architecture only, because
# every extra one is another full device compilation of each .cu file (CI builds on 2 cores).

if(CMAKE_CUDA_COMPILER)
  set(_weft_nvcc "${CMAKE_CUDA_COMPILER}")
else()
  find_program(_weft_nvcc nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin
               PATHS /usr/local/cuda/bin NO_CACHE)
endif()
if(_weft_nvcc)
  set(_weft_cuda_default ON)
else()
  set(_weft_cuda_default OFF)
endif()
option(WEFT_CUDA "Build the CUDA kernels (needs nvcc; the tests skip where no GPU is visible)"
       ${_weft_cuda_default})
set(WEFT_CUDA_ARCHS "90a" CACHE STRING
    "CUDA architectures for WEFT_CUDA (CMAKE_CUDA_ARCHITECTURES form; 90a = H100/H200)")

if(WEFT_CUDA)
  if(NOT _weft_nvcc)
    message(FATAL_ERROR "WEFT_CUDA=ON but nvcc was not found: pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc "
                        "or configure with -DWEFT_CUDA=OFF")
  endif()
  set(CMAKE_CUDA_COMPILER "${_weft_nvcc}")
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${WEFT_CUDA_ARCHS}")
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # C++20 in device code too: core/check.h (__VA_OPT__) and core/dtype.h (std::bit_cast) need it.
  # CMake before 3.26 does not know nvcc 13's flag for it (and would refuse CUDA_STANDARD 20, which
  # CMAKE_CXX_STANDARD implies), so tell it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  # -lineinfo keeps source lines for the profiler at no run-time cost.
  add_library(weft_cuda_flags INTERFACE)
  target_compile_options(weft_cuda_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  message(STATUS "CUDA: ${CMAKE_CUDA_COMPILER} ${CUDAToolkit_VERSION}, architectures ${WEFT_CUDA_ARCHS}")

  # NCCL for the communicator on device buffers (src/weft/comm/cuda, docs/cuda.md). CUDA 13's
  # toolkit here ships it beside cudart (include/nccl.h, lib/libnccl.so); NVIDIA's packages put
  # it in the system directories, which find_* searches anyway. Without it weft_comm_cuda is built
  # with the staged communicator alone (WEFT_HAVE_NCCL undefined; make_nccl_communicator throws).
  find_path(WEFT_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include
                  /usr/local/cuda/include)
  find_library(WEFT_NCCL_LIBRARY nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                     ${CUDAToolkit_LIBRARY_ROOT}/lib64 /usr/local/cuda/lib /usr/local/cuda/lib64)
  if(WEFT_NCCL_INCLUDE_DIR AND WEFT_NCCL_LIBRARY)
    set(WEFT_HAVE_NCCL ON)
    add_library(weft_nccl UNKNOWN IMPORTED)
    set_target_properties(weft_nccl PROPERTIES IMPORTED_LOCATION "${WEFT_NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${WEFT_NCCL_INCLUDE_DIR}")
    message(STATUS "NCCL: ${WEFT_NCCL_LIBRARY} (the NCCL communicator is built)")
  else()
    set(WEFT_HAVE_NCCL OFF)
    message(STATUS "NCCL: not found (weft_comm_cuda has the staged communicator only; "
                   "set WEFT_NCCL_INCLUDE_DIR and WEFT_NCCL_LIBRARY to use one)")
  endif()
else()
  if(_weft_nvcc)
    message(STATUS "CUDA: off (WEFT_CUDA=OFF)")
  else()
    message(STATUS "CUDA: off (nvcc not found)")
  endif()
endif()
