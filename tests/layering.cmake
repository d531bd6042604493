# The include rule of docs/structures.md, checked on every file under src/ (.cu / .cuh too)
# and include/ (run by ctest as `layering`): a layer includes only itself
# and the layers listed for it, so dependencies point one way
#   util < format < checkpoint, device < kernels < model < runtime < cli
# (tokenizer and convert beside them; server uses only the public header,
# tokenizer and util, and cli starts it). include/nibble/ is the public API and
# includes the standard library only.
#   cmake -DROOT=<checkout> -P tests/layering.cmake
set(allowed_util "")
set(allowed_format "util")
set(allowed_checkpoint "format;util")
set(allowed_device "util")
set(allowed_tokenizer "util")
set(allowed_kernels "checkpoint;device;format;util")
set(allowed_model "kernels;checkpoint;device;format;util")
set(allowed_convert "checkpoint;format;util")
set(allowed_runtime "nibble;model;kernels;checkpoint;device;format;tokenizer;util")
# server/ stays on the public API: it may not reach into runtime or model.
set(allowed_server "nibble;tokenizer;util")
# cli/ runs models only through the public Engine (include/nibble): no
# model/. It keeps the planner, checkpoint and kernel registry for explain,
# inspect, convert and the kernel benchmarks, and runtime/'s text helpers.
set(allowed_cli "nibble;server;runtime;kernels;convert;checkpoint;device;format;tokenizer;util")
# System headers a layer may not include, with the reason. kernels/ plans
# and runs ops on weights: config.json and the tensor names belong to the
# model's layout (model/registry.h), so the planner does not parse JSON.
set(forbidden_system_kernels "nlohmann/")
set(forbidden_why_kernels "kernels/ does not read config.json or other JSON (the model supplies its layout)")

file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/src/*.cpp ${ROOT}/src/*.h ${ROOT}/src/*.cu ${ROOT}/src/*.cuh
     ${ROOT}/include/*.h)
set(bad 0)
foreach(f ${files})
  if(f MATCHES "^include/")
    set(layer "nibble")
  else()
    string(REGEX REPLACE "^src/([a-z_]+)/.*" "\\1" layer "${f}")
  endif()
  if(DEFINED forbidden_system_${layer})
    file(STRINGS ${ROOT}/${f} system_lines REGEX "^#include <")
    foreach(line ${system_lines})
      foreach(prefix ${forbidden_system_${layer}})
        string(FIND "${line}" "<${prefix}" at)
        if(at GREATER_EQUAL 0)
          message(SEND_ERROR "${f}: ${line}: ${forbidden_why_${layer}}")
          math(EXPR bad "${bad} + 1")
        endif()
      endforeach()
    endforeach()
  endif()
  file(STRINGS ${ROOT}/${f} lines REGEX "^#include \"")
  foreach(line ${lines})
    string(REGEX REPLACE "^#include \"([^\"]*)\".*" "\\1" inc "${line}")
    string(REGEX REPLACE "^([a-z_]+)/.*" "\\1" to "${inc}")
    if(to STREQUAL inc OR to STREQUAL layer)
      continue()  # a file of its own folder (or a same-folder relative include)
    endif()
    if(layer STREQUAL "nibble")
      message(SEND_ERROR "${f}: the public header includes ${inc} (only the standard library is allowed)")
      math(EXPR bad "${bad} + 1")
      continue()
    endif()
    if(NOT DEFINED allowed_${layer})
      message(SEND_ERROR "${f}: folder src/${layer} has no rule in tests/layering.cmake")
      math(EXPR bad "${bad} + 1")
      continue()
    endif()
    list(FIND allowed_${layer} "${to}" i)
    if(i LESS 0)
      message(SEND_ERROR "${f}: ${layer}/ may not include ${inc} (${layer} may include: ${allowed_${layer}})")
      math(EXPR bad "${bad} + 1")
    endif()
    if(layer STREQUAL "cli" AND inc MATCHES "^kernels/cpu/")
      message(SEND_ERROR "${f}: cli/ may not use kernels/cpu internals (${inc})")
      math(EXPR bad "${bad} + 1")
    endif()
  endforeach()
endforeach()
list(LENGTH files n)
if(bad GREATER 0)
  message(FATAL_ERROR "layering: ${bad} include(s) break the rule")
endif()
message(STATUS "layering: ${n} files follow the include rule")
