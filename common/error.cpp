#include "common/error.hpp"

#include <unistd.h>

#include <cstring>

#include "common/process.hpp"

namespace tandem {

CallError::CallError(std::string_view library, int code, std::string_view detail, std::string_view call, CallSite site)
    : std::runtime_error(fmt::format("{} failed: {} ({} error {}) at {}:{}, pid {} on {}", call, detail, library, code,
                                     site.file, site.line, ::getpid(), host_name())),
      library_(library),
      code_(code) {}

void throw_errno_error(int err, std::string_view call, CallSite site) {
  throw CallError("system", err, std::strerror(err), call, site);
}

std::string first_line(const std::exception& e) {
  const std::string_view what = e.what();
  return std::string(what.substr(0, what.find('\n')));
}

int run_main(std::string_view program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UserError& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  } catch (const CallError& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 70;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: internal error: {}\n", program, e.what());
    return 70;
  }
}

}  // namespace tandem
