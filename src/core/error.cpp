// Out-of-line pieces of the error helpers (keeps <string> formatting out of headers).
#include "core/error.hpp"

namespace shardtrain::detail {

void throw_error(const char* file, int line, const std::string& message) {
  std::string f(file);
  // Keep paths short and stable: strip everything before the project's top folders.
  for (const char* top : {"/src/", "/kernels/", "/io/", "/tests/"}) {
    auto pos = f.rfind(top);
    if (pos != std::string::npos) {
      f = f.substr(pos + 1);
      break;
    }
  }
  throw Error(f + ":" + std::to_string(line) + ": " + message);
}

}  // namespace shardtrain::detail
