// tests/bench/checkpoint_read_compare.cpp: the two ways to read a checkpoint's
// state vectors, timed on one file (tests/bench/checkpoint_read_bandwidth.sh).
//   checkpoint_read_compare FILE mpiio   every rank opens FILE with HDF5's MPI-IO
//                                        driver (collective metadata) and reads its
//                                        1/N slice of every /state/* vector with one
//                                        collective H5Dread each: the reader before
//                                        issue 47
//   checkpoint_read_compare FILE pread   rank 0 opens FILE with HDF5's POSIX driver
//                                        and finds each vector's data offset
//                                        (H5Dget_offset), broadcasts them, closes it;
//                                        every rank preads its slice: the reader now
// Prints on rank 0 one line "METHOD BYTES SECONDS MB/s": the bytes of every
// vector, and the time from the open to the last rank's last read (a barrier).
// No CRC is computed (both readers compute the same CRCs); the page cache is
// whatever the caller left (the script drops FILE's pages before each run).
#include <hdf5.h>
#include <mpi.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "checkpoint_read_compare: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

struct Vector {
  std::string name;
  std::int64_t len = 0, elem = 0, offset = -1;
};

// The /state/* datasets of an open file.
std::vector<Vector> vectors_of(hid_t file) {
  std::vector<Vector> out;
  for (const char* n : {"master", "exp_avg", "exp_avg_sq", "params_fp16", "params_bf16"}) {
    const std::string p = std::string("/state/") + n;
    if (H5Lexists(file, p.c_str(), H5P_DEFAULT) <= 0) continue;
    const hid_t ds = H5Dopen2(file, p.c_str(), H5P_DEFAULT);
    const hid_t t = H5Dget_type(ds), s = H5Dget_space(ds);
    hsize_t len = 0;
    H5Sget_simple_extent_dims(s, &len, nullptr);
    const haddr_t off = H5Dget_offset(ds);
    out.push_back({p, static_cast<std::int64_t>(len), static_cast<std::int64_t>(H5Tget_size(t)),
                   off == HADDR_UNDEF ? -1 : static_cast<std::int64_t>(off)});
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(ds);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 3) die("usage: checkpoint_read_compare FILE mpiio|pread");
  const std::string path = argv[1], method = argv[2];
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  std::vector<unsigned char> buf;
  std::uint64_t bytes = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  if (method == "mpiio") {
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    H5Pset_all_coll_metadata_ops(fapl, true);
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
    if (file < 0) die("cannot open " + path);
    const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    for (const Vector& v : vectors_of(file)) {
      const std::int64_t lo = v.len * rank / size, hi = v.len * (rank + 1) / size;
      buf.resize(static_cast<std::size_t>(std::max<std::int64_t>(hi - lo, 1) * v.elem));
      const hid_t ds = H5Dopen2(file, v.name.c_str(), H5P_DEFAULT);
      const hid_t type = H5Dget_type(ds), fs = H5Dget_space(ds);
      const hsize_t start = static_cast<hsize_t>(lo), count = static_cast<hsize_t>(hi - lo);
      const hsize_t mdim = std::max<hsize_t>(count, 1);
      const hid_t ms = H5Screate_simple(1, &mdim, nullptr);
      if (count > 0) {
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
      } else {
        H5Sselect_none(fs);
        H5Sselect_none(ms);
      }
      if (H5Dread(ds, type, ms, fs, dxpl, buf.data()) < 0) die("collective read of " + v.name + " failed");
      bytes += static_cast<std::uint64_t>(v.len * v.elem);
      H5Sclose(ms);
      H5Sclose(fs);
      H5Tclose(type);
      H5Dclose(ds);
    }
    H5Pclose(dxpl);
    H5Fclose(file);
    H5Pclose(fapl);
  } else if (method == "pread") {
    std::vector<std::int64_t> table;  // len, elem, offset per vector
    if (rank == 0) {
      const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
      H5Pset_fapl_sec2(fapl);
      const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
      if (file < 0) die("cannot open " + path);
      for (const Vector& v : vectors_of(file)) table.insert(table.end(), {v.len, v.elem, v.offset});
      H5Fclose(file);
      H5Pclose(fapl);
    }
    int n = static_cast<int>(table.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    table.resize(static_cast<std::size_t>(n));
    MPI_Bcast(table.data(), n, MPI_INT64_T, 0, MPI_COMM_WORLD);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("cannot open " + path);
    for (std::size_t i = 0; i + 2 < table.size(); i += 3) {
      const std::int64_t len = table[i], elem = table[i + 1], off = table[i + 2];
      if (off < 0) die("a state vector is not stored contiguous");
      const std::int64_t lo = len * rank / size, hi = len * (rank + 1) / size;
      buf.resize(static_cast<std::size_t>(std::max<std::int64_t>(hi - lo, 1) * elem));
      const std::uint64_t want = static_cast<std::uint64_t>((hi - lo) * elem);
      for (std::uint64_t done = 0; done < want;) {
        const ssize_t got = ::pread(fd, buf.data() + done, want - done, static_cast<off_t>(off + lo * elem + done));
        if (got <= 0) die("pread failed");
        done += static_cast<std::uint64_t>(got);
      }
      bytes += static_cast<std::uint64_t>(len * elem);
    }
    ::close(fd);
  } else {
    die("unknown method '" + method + "' (mpiio or pread)");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double secs = MPI_Wtime() - t0;
  if (rank == 0) std::printf("%s %llu %.4f %.1f\n", method.c_str(), static_cast<unsigned long long>(bytes), secs,
                             static_cast<double>(bytes) / 1e6 / secs);
  MPI_Finalize();
  return 0;
}
