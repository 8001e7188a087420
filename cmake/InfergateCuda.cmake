# CUDA is optional. INFERGATE_CUDA=AUTO builds the .cu sources when nvcc is found, ON requires it,
# OFF leaves it out. Sets INFERGATE_HAVE_CUDA and, when NCCL is present, the target infergate::nccl.
include_guard(GLOBAL)

set(INFERGATE_HAVE_CUDA OFF)
set(INFERGATE_HAVE_NCCL OFF)
if(NOT INFERGATE_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # One architecture by default keeps CI compile time down; the H200 is sm_90.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know how to ask nvcc for C++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(INFERGATE_HAVE_CUDA ON)
    string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr -Xcompiler=-Wall")
    if(INFERGATE_WERROR)
      string(APPEND CMAKE_CUDA_FLAGS " -Werror=all-warnings")
    endif()

    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(infergate::nccl UNKNOWN IMPORTED)
      set_target_properties(infergate::nccl PROPERTIES
        IMPORTED_LOCATION ${NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
      set(INFERGATE_HAVE_NCCL ON)
    endif()
  elseif(INFERGATE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "INFERGATE_CUDA=ON but no CUDA compiler was found (looked for nvcc)")
  endif()
endif()
message(STATUS "infergate: CUDA ${INFERGATE_HAVE_CUDA}, NCCL ${INFERGATE_HAVE_NCCL}")
