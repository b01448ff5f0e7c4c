# Helpers to register tests consistently.
#   shardtrain_unit_test(NAME SOURCES... LIBS...)           -> label "unit"
#   shardtrain_mpi_test(NAME TARGET RANKS <n...> [ARGS ...])  -> one test per rank count, label "mpi"
# MPI tests run through mpiexec with the environment this machine needs (root,
# oversubscription for more ranks than cores, one BLAS thread per rank).
include(GoogleTest)

set(SHARDTRAIN_MPI_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1;HDF5_USE_FILE_LOCKING=FALSE")

function(shardtrain_unit_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1;HDF5_USE_FILE_LOCKING=FALSE")
endfunction()

# Registers an already-defined executable target as MPI tests at each rank count.
function(shardtrain_mpi_test name target)
  cmake_parse_arguments(ARG "" "" "RANKS;ARGS;LABELS" ${ARGN})
  if(NOT ARG_RANKS)
    set(ARG_RANKS 1 2 3)
  endif()
  foreach(n IN LISTS ARG_RANKS)
    add_test(NAME ${name}_np${n}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
              $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${ARG_ARGS})
    set_tests_properties(${name}_np${n} PROPERTIES LABELS "mpi;${ARG_LABELS}" PROCESSORS ${n}
      ENVIRONMENT "${SHARDTRAIN_MPI_ENV}" TIMEOUT 300)
  endforeach()
endfunction()
