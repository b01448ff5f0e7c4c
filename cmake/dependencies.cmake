# Finds every third-party dependency once and exposes each as a target.
# All of them install with apt-get on Debian 12 (share/install-deps.sh).

find_package(MPI REQUIRED COMPONENTS C CXX)

# Kokkos + KokkosKernels. Debian's Trilinos 13.2 exports a Kokkos::kokkos target
# whose include directory does not exist, so we build our own INTERFACE target
# from the variables its config sets. A user's own Kokkos build (Spack, CUDA,
# OpenMP) exports a working target; set SHARDTRAIN_USE_KOKKOS_TARGET=ON for that.
option(SHARDTRAIN_USE_KOKKOS_TARGET "Link Kokkos::kokkos and Kokkos::kokkoskernels directly" OFF)
find_package(KokkosKernels REQUIRED)
add_library(shardtrain_kokkos INTERFACE)
if(SHARDTRAIN_USE_KOKKOS_TARGET)
  target_link_libraries(shardtrain_kokkos INTERFACE Kokkos::kokkoskernels Kokkos::kokkos)
else()
  target_include_directories(shardtrain_kokkos SYSTEM INTERFACE ${KokkosKernels_INCLUDE_DIRS})
  foreach(lib IN LISTS KokkosKernels_LIBRARIES)
    find_library(_st_lib_${lib} NAMES ${lib} HINTS ${KokkosKernels_LIBRARY_DIRS} REQUIRED)
    target_link_libraries(shardtrain_kokkos INTERFACE ${_st_lib_${lib}})
  endforeach()
  target_link_libraries(shardtrain_kokkos INTERFACE MPI::MPI_CXX dl)
endif()

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "shardtrain needs a parallel (MPI) HDF5; install libhdf5-openmpi-dev")
endif()

find_package(tomlplusplus REQUIRED)
find_package(CLI11 QUIET)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
find_package(fmt REQUIRED)

if(SHARDTRAIN_ENABLE_TESTS)
  find_package(GTest REQUIRED)
endif()
