# Third-party dependencies, all from Debian (scripts/bootstrap.sh installs them).
# GEMM backend: oneDNN (dnnl_sgemm); docs/gemm-backend.md records the measurement that chose it.
find_package(OpenMP REQUIRED)
find_package(fmt REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
# PCRE2 (8-bit, with JIT) for GPT-2's pre-tokenization regex (data/bpe_tokenizer.cc).
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# Debian's dnnl-config.cmake demands OpenCL headers we do not use, so find oneDNN directly.
find_path(DNNL_INCLUDE_DIR dnnl.h REQUIRED)
find_library(DNNL_LIBRARY dnnl REQUIRED)
add_library(weft_dnnl INTERFACE)
target_include_directories(weft_dnnl SYSTEM INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(weft_dnnl INTERFACE ${DNNL_LIBRARY})
if(WEFT_TESTS)
  find_package(GTest REQUIRED)
endif()
find_package(Python3 COMPONENTS Interpreter)
