// GoogleTest main for unit tests that need MPI initialised (TokenDataset opens
// files through the MPI-IO driver). Runs as a singleton MPI process.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
