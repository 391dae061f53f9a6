// Liveness (common/process.hpp): the one rule that says whether the process a record names is still there.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>

#include "common/process.hpp"
#include "tests/harness.hpp"

using namespace tandem;

TEST_CASE("process: a child that has exited but is not yet reaped (a zombie) is not alive" * doctest::timeout(30)) {
  test::Child zombie = test::zombie_child();
  const auto pid = static_cast<std::uint32_t>(zombie.pid());
  const auto id = process_identity(pid);
  REQUIRE(id);
  CHECK(::kill(zombie.pid(), 0) == 0);  // what kill(pid, 0) alone would call alive
  CHECK_FALSE(process_alive(pid));
  CHECK_FALSE(process_alive(pid, id->start_ticks));
  CHECK(zombie.wait() == 0);
  CHECK_FALSE(process_alive(pid, id->start_ticks));  // reaped (and its pid perhaps reused since)
}

TEST_CASE("process: a running process is alive; a pid whose start time differs from the recorded one is not") {
  const auto self = static_cast<std::uint32_t>(::getpid());
  const auto id = process_identity(self);
  REQUIRE(id);
  CHECK(process_alive(self));
  CHECK(process_alive(self, id->start_ticks));
  CHECK_FALSE(process_alive(self, id->start_ticks + 1));
  // A record that kept only the low 32 bits (a lease owner word) compares only those.
  CHECK(process_alive(self, (id->start_ticks & 0xffffffffu) | (std::uint64_t{1} << 40), 0xffffffffu));
  CHECK_FALSE(process_alive(self, id->start_ticks + 1, 0xffffffffu));
  CHECK_FALSE(process_alive(0));
}
