# The CUDA part of the build (docs/cuda.md).
#
# -DNIBBLE_CUDA=AUTO (default): on when CMake finds nvcc, else off, said in
#   the configure output. ON: nvcc is required. OFF: everything builds as
#   without CUDA (the CUDA entry points answer "built without CUDA").
# -DNIBBLE_CUDA_ARCHS="80;90a": narrows the default target list. Each arch is
#   compiled to machine code (-real); the lowest one also to PTX, so a GPU
#   newer than every listed arch still runs (JIT from that PTX, without the
#   arch-specific instructions, which are guarded by feature macros).
#
# The CUDA sources are src/**/*.cu:
# they become the object library nibble_cuda, linked into nibble_core with
# the static CUDA runtime (the binary needs only the driver's libcuda.so at
# run time, so it runs where the toolkit's libcudart is not installed). With
# CUDA off, src/**/*_nocuda.cpp stand in for the .cu files' entry points.

set(NIBBLE_CUDA_DEFAULT_ARCHS 80 86 89 90a 100a 120a)
set(NIBBLE_CUDA AUTO CACHE STRING "Build the CUDA kernels: AUTO (when nvcc is found), ON or OFF")
set_property(CACHE NIBBLE_CUDA PROPERTY STRINGS AUTO ON OFF)
# Build folders configured before this file existed hold NIBBLE_CUDA as the
# BOOL of an old option() that defaulted to OFF; a value the user gave (-D
# without a type) is never BOOL. Those folders get the new default.
get_property(nibble_cuda_type CACHE NIBBLE_CUDA PROPERTY TYPE)
if(nibble_cuda_type STREQUAL "BOOL")
  set_property(CACHE NIBBLE_CUDA PROPERTY TYPE STRING)
  set_property(CACHE NIBBLE_CUDA PROPERTY VALUE AUTO)
  set(NIBBLE_CUDA AUTO)
endif()
set(NIBBLE_CUDA_ARCHS "${NIBBLE_CUDA_DEFAULT_ARCHS}" CACHE STRING
    "CUDA archs to build (subset of: ${NIBBLE_CUDA_DEFAULT_ARCHS})")

string(TOUPPER "${NIBBLE_CUDA}" nibble_cuda_mode)
if(NOT nibble_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "NIBBLE_CUDA=${NIBBLE_CUDA}: expected AUTO, ON or OFF")
endif()
if(NIBBLE_FUZZ AND nibble_cuda_mode STREQUAL "AUTO")
  set(nibble_cuda_mode OFF)  # the fuzz build is clang + libFuzzer on the parser only
  set(NIBBLE_FUZZ_NOTE " for the fuzz build")
endif()

set(NIBBLE_CUDA_ENABLED OFF)
if(nibble_cuda_mode STREQUAL "OFF")
  message(STATUS "nibble: CUDA off (NIBBLE_CUDA=OFF${NIBBLE_FUZZ_NOTE})")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(NIBBLE_CUDA_ENABLED ON)
  elseif(nibble_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "NIBBLE_CUDA=ON but no CUDA compiler (nvcc) was found; set CUDACXX or PATH, "
                        "or use -DNIBBLE_CUDA=AUTO|OFF")
  else()
    message(STATUS "nibble: CUDA off (NIBBLE_CUDA=AUTO and no nvcc found)")
  endif()
endif()

if(NIBBLE_CUDA_ENABLED)
  foreach(a ${NIBBLE_CUDA_ARCHS})
    if(NOT a IN_LIST NIBBLE_CUDA_DEFAULT_ARCHS)
      message(FATAL_ERROR "NIBBLE_CUDA_ARCHS: '${a}' is not one of ${NIBBLE_CUDA_DEFAULT_ARCHS}")
    endif()
  endforeach()
  list(GET NIBBLE_CUDA_ARCHS 0 nibble_lowest)
  set(nibble_archs ${nibble_lowest}-virtual)
  foreach(a ${NIBBLE_CUDA_ARCHS})
    list(APPEND nibble_archs ${a}-real)
  endforeach()
  set(CMAKE_CUDA_ARCHITECTURES ${nibble_archs})
  # C++17: CMake 3.25 has no CUDA20 dialect flags for nvcc; the .cu files need no more.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "nibble: CUDA on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}), archs ${nibble_archs}")

  file(GLOB_RECURSE NIBBLE_CUDA_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.cu)
  add_library(nibble_cuda OBJECT ${NIBBLE_CUDA_SRC})
  target_include_directories(nibble_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  # Warnings are errors in device code too; the host side of a .cu file gets
  # the C++ build's warning set through the host compiler.
  target_compile_options(nibble_cuda PRIVATE --Werror=all-warnings -Xcompiler=-Wall,-Wextra
                         $<$<BOOL:${NIBBLE_SANITIZE}>:-Xcompiler=-fno-omit-frame-pointer>)
  set_target_properties(nibble_cuda PROPERTIES POSITION_INDEPENDENT_CODE OFF CUDA_RUNTIME_LIBRARY Static)
  target_link_libraries(nibble_cuda PUBLIC CUDA::cudart_static)
  list(FILTER NIBBLE_CORE_SRC EXCLUDE REGEX "_nocuda\\.cpp$")
  # The stand-ins a build without nvcc compiles instead of the .cu files,
  # compiled here too and linked into nothing: a CUDA header they no longer
  # match fails this build (-Wmissing-declarations: a definition whose
  # signature drifted from its header's declares nothing), not only the
  # build of a machine without nvcc.
  file(GLOB_RECURSE NIBBLE_NOCUDA_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*_nocuda.cpp)
  add_library(nibble_nocuda_check OBJECT ${NIBBLE_NOCUDA_SRC})
  target_include_directories(nibble_nocuda_check PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  target_compile_options(nibble_nocuda_check PRIVATE -Wmissing-declarations)
else()
  set(NIBBLE_CUDA_SRC "")
endif()

# Links the CUDA objects (or nothing) into `target` and tells its code which.
function(nibble_link_cuda target)
  if(NIBBLE_CUDA_ENABLED)
    target_link_libraries(${target} PUBLIC nibble_cuda CUDA::cudart_static)
    target_compile_definitions(${target} PUBLIC NIBBLE_HAS_CUDA=1)
  else()
    target_compile_definitions(${target} PUBLIC NIBBLE_HAS_CUDA=0)
  endif()
endfunction()
