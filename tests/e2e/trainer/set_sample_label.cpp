// Test helper of the classifier end-to-end tests: copies a labelled-sample data
// set and writes one label the importers would refuse into the copy.
//   set_sample_label IN OUT SPLIT ROW VALUE   -> OUT with /SPLIT/labels[ROW] = VALUE
// Exits 1 with a message when a step fails. Plain serial HDF5 (default driver).
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s IN OUT SPLIT ROW VALUE\n", argv[0]);
    return 1;
  }
  const std::string out = argv[2], name = std::string("/") + argv[3] + "/labels";
  const hsize_t row = std::strtoull(argv[4], nullptr, 10), one = 1;
  const int value = std::atoi(argv[5]);
  std::error_code ec;
  std::filesystem::copy_file(argv[1], out, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) {
    std::fprintf(stderr, "set_sample_label: cannot copy %s to %s: %s\n", argv[1], out.c_str(), ec.message().c_str());
    return 1;
  }
  const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t d = f < 0 ? -1 : H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t fs = d < 0 ? -1 : H5Dget_space(d);
  const hid_t ms = H5Screate_simple(1, &one, nullptr);
  const bool ok = fs >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &row, nullptr, &one, nullptr) >= 0 &&
                  H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, &value) >= 0;
  if (fs >= 0) H5Sclose(fs);
  H5Sclose(ms);
  if (d >= 0) H5Dclose(d);
  if (f < 0 || H5Fclose(f) < 0 || !ok) {
    std::fprintf(stderr, "set_sample_label: cannot write %s[%llu] in %s\n", name.c_str(),
                 static_cast<unsigned long long>(row), out.c_str());
    return 1;
  }
  return 0;
}
