# cmake -DSRC=<repo>/src/weft -P check_dag.cmake
# Fails when a module includes a header of a module outside its allowed dependencies: the module
# DAG of DESIGN.md §2, checked on the sources themselves (link lines alone would not catch a
# header-only edge).
set(allowed_core core)
set(allowed_comm core comm)
set(allowed_tensor core tensor)
set(allowed_kernels core tensor kernels)
# optim: ZeRO's shard layout (pure), AdamW and the data-parallel optimizer (ZeRO 0-3), which drives
# a model chunk through the small interface of optim/params.h and reduces over a communicator; it
# knows no model. model implements that interface and prices ZeRO with the shard layout.
set(allowed_optim core tensor kernels comm optim)
set(allowed_model core tensor kernels comm parallel optim model)
set(allowed_schedule core schedule)
# layout: THE layout type and the one rule book of parallel layouts, shared by the trainer, the
# planner and the checkpoints; its grid is parallel's GridShape (the pure topology).
set(allowed_layout core tensor schedule model parallel layout)
set(allowed_parallel core comm parallel)
set(allowed_data core data)
set(allowed_checkpoint core tensor kernels comm parallel model optim schedule layout checkpoint)
# config: the run config (RUN.toml), which names the model, data, optimizer, checkpoint and layout
# it configures; the runtime and the CLI read it, the planner does not.
set(allowed_config core tensor kernels comm parallel model optim schedule data checkpoint layout
    config)
# plot: SVG line charts; core alone, so the trainer, the CLI (and one day the planner) draw with it.
set(allowed_plot core plot)
set(allowed_runtime core tensor kernels comm parallel model optim schedule data checkpoint layout
    config plot runtime)
set(allowed_planner core tensor schedule parallel optim model layout planner)
set(allowed_cli core tensor kernels comm parallel model optim schedule data checkpoint layout
    config plot runtime planner cli)
# Sub-modules: a directory inside a module that is its own library with narrower edges; its files
# are checked against its own list, not the module's. kernels/cuda (weft_kernels_cuda, optional)
# links weft_core alone and may include the kernels headers (ops.inc, kernels.h).
# comm/cuda (weft_comm_cuda, optional) holds the communicators on device buffers: it may include
# comm and the CUDA backend's memory headers (kernels/cuda/arena.h, cuda_check.h), which keeps
# weft_comm itself free of CUDA.
set(submodules kernels/cuda comm/cuda)
set(allowed_kernels/cuda core kernels)
set(allowed_comm/cuda core comm kernels)

file(GLOB modules RELATIVE ${SRC} ${SRC}/*)
set(violations "")
foreach(module ${modules})
  if(NOT IS_DIRECTORY ${SRC}/${module})
    continue()
  endif()
  if(NOT DEFINED allowed_${module})
    string(APPEND violations "module '${module}' has no entry in cmake/check_dag.cmake\n")
    continue()
  endif()
  file(GLOB_RECURSE files ${SRC}/${module}/*.h ${SRC}/${module}/*.cc ${SRC}/${module}/*.inc
       ${SRC}/${module}/*.cu ${SRC}/${module}/*.cuh)
  foreach(f ${files})
    file(RELATIVE_PATH rel ${SRC} ${f})
    set(owner ${module})
    foreach(sub ${submodules})
      if(rel MATCHES "^${sub}/")
        set(owner ${sub})
      endif()
    endforeach()
    file(STRINGS ${f} includes REGEX "^#include \"weft/[a-z_]+/")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"weft/([a-z_]+)/.*" "\\1" dep "${line}")
      list(FIND allowed_${owner} ${dep} found)
      if(found EQUAL -1)
        string(APPEND violations "${rel}: module '${owner}' may not include '${dep}' (${line})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "module DAG violated:\n${violations}")
endif()
message(STATUS "module DAG ok")
