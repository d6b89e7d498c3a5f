# Third-party dependencies, all from Debian (scripts/bootstrap.sh installs them).
# GEMM backend: oneDNN (dnnl_sgemm); docs/gemm-backend.md records the measurement that chose it.
find_package(OpenMP REQUIRED)
find_package(fmt REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(dnnl REQUIRED)
if(WEFT_TESTS)
  find_package(GTest REQUIRED)
endif()
find_package(Python3 COMPONENTS Interpreter)
