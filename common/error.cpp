#include "common/error.hpp"

#include <unistd.h>

#include <cstring>
#include <system_error>

namespace tandem {

void throw_system_error(int err, std::string_view call, const char* file, int line) {
  throw std::system_error(err, std::generic_category(),
                          fmt::format("{} failed at {}:{} (pid {})", call, file, line, getpid()));
}

int run_main(std::string_view program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UserError& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: internal error: {}\n", program, e.what());
    return 70;
  }
}

}  // namespace tandem
