// wire_probe: runs one kind of MpiCommunicator collective at the given sizes
// and writes this rank's payload and wire model to DIR/model.<rank>, for
// wire_check.py to compare with Open MPI's pml monitoring dump (written at
// MPI_Finalize). Nothing else here sends a message.
// usage: wire_probe KIND DIR COUNT... (KIND: all_reduce broadcast barrier
// reduce_scatter all_gather iall_reduce ireduce_scatter iall_gather
// ireduce_scatter_v iall_gather_v; F32 elements; _v: rank q gets COUNT + q,
// the last rank 0 from 3 ranks up)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mpi.h>

#include "parallel/mpi/mpi_communicator.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    using namespace shardtrain;
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int r = comm.rank(), n = comm.size();
    const std::string kind = argc > 2 ? argv[1] : "";
    for (int a = 3; a < argc; ++a) {
      const std::size_t c = std::strtoull(argv[a], nullptr, 10);
      std::vector<std::size_t> counts(n);
      std::size_t total = 0, displ = 0;
      for (int q = 0; q < n; ++q) {
        counts[q] = (n > 2 && q == n - 1) ? 0 : c + q;
        if (q < r) displ += counts[q];
        total += counts[q];
      }
      std::vector<float> x(n * c + total + 1, 1.0f);
      if (kind == "all_reduce") comm.all_reduce(x.data(), c, DType::F32, ReduceOp::Sum);
      else if (kind == "broadcast") for (int root = 0; root < n; ++root) comm.broadcast(x.data(), c, DType::F32, root);
      else if (kind == "barrier") comm.barrier();
      else if (kind == "reduce_scatter") comm.reduce_scatter(x.data(), x.data() + r * c, c, DType::F32, ReduceOp::Sum);
      else if (kind == "all_gather") comm.all_gather(x.data() + r * c, x.data(), c, DType::F32);
      else if (kind == "iall_reduce") comm.iall_reduce(x.data(), c, DType::F32, ReduceOp::Sum)->wait();
      else if (kind == "ireduce_scatter") comm.ireduce_scatter(x.data(), x.data() + r * c, c, DType::F32, ReduceOp::Sum)->wait();
      else if (kind == "iall_gather") comm.iall_gather(x.data() + r * c, x.data(), c, DType::F32)->wait();
      else if (kind == "ireduce_scatter_v") comm.ireduce_scatter_v(x.data(), x.data() + displ, counts, DType::F32, ReduceOp::Sum)->wait();
      else if (kind == "iall_gather_v") comm.iall_gather_v(x.data() + displ, x.data(), counts, DType::F32)->wait();
      else { std::fprintf(stderr, "wire_probe: unknown kind '%s'\n", kind.c_str()); code = 2; break; }
    }
    if (code == 0) {
      const CommTally& t = comm.tally();
      const std::string path = std::string(argv[2]) + "/model." + std::to_string(r);
      std::FILE* f = std::fopen(path.c_str(), "w");
      if (!f) { std::perror(path.c_str()); code = 1; }
      else {
        std::string algs;
        for (int k = 0; k < kCollectives; ++k) {
          const std::string a = comm.wire_algorithms(static_cast<Collective>(k));
          if (!a.empty()) algs += (algs.empty() ? "" : "; ") + a;
        }
        std::fprintf(f, "%d %llu %llu %llu %s\n", r, static_cast<unsigned long long>(t.payload_total()),
                     static_cast<unsigned long long>(t.model_total()),
                     static_cast<unsigned long long>(t.unmodelled_total()), algs.c_str());
        std::fclose(f);
      }
    }
  }
  MPI_Finalize();
  return code;
}
