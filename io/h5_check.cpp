// Out-of-line parts of the HDF5 check helpers: silencing HDF5's own error
// printing and turning its error stack into exception text.
#include "io/h5_check.hpp"

namespace shardtrain::h5 {

void quiet_errors() { (void)H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
herr_t collect(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n > 0) out->append("; ");
  out->append(err->func_name ? err->func_name : "?");
  out->append(": ");
  out->append(err->desc ? err->desc : "?");
  return 0;
}
}  // namespace

std::string error_stack_text() {
  std::string text;
  (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &text);
  (void)H5Eclear2(H5E_DEFAULT);
  for (char& c : text)
    if (c == '\n') c = ' ';  // some HDF5 messages embed newlines; keep errors on one line
  return text;
}

namespace detail {
void throw_h5_error(const char* file, int line, const char* call) {
  std::string msg = std::string("HDF5 call failed: ") + call;
  const std::string stack = error_stack_text();
  if (!stack.empty()) msg += ": " + stack;
  ::shardtrain::detail::throw_error(file, line, msg);
}
}  // namespace detail

}  // namespace shardtrain::h5
