#include "learner/ddp/rendezvous.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "common/error.hpp"
#include "learner/ddp/rank_env.hpp"

namespace tandem::ddp {
namespace {

std::string arrived_key(int rank) { return fmt::format("arrived/{}", rank); }

// Whether something accepts a TCP connection at host:port now (one attempt, a refused one returns at
// once on a loopback or LAN address).
bool accepts_connections(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool connected = false;
  for (const addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(found);
  return connected;
}

}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous(const RankInfo& rank, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  const double timeout_s = std::chrono::duration<double>(timeout).count();
  const std::string where = fmt::format("{}:{}", rank.master_addr, rank.master_port);

  c10d::TCPStoreOptions opts;
  opts.port = rank.master_port;
  opts.isServer = rank.rank == 0 && !rank.launcher_store;
  opts.numWorkers = static_cast<std::size_t>(rank.world_size);
  opts.waitWorkers = false;  // arrival is checked below, where missing ranks can be named
  opts.timeout = timeout;
  // A client waits for the store's port under our own deadline first: how long TCPStore's constructor
  // retries a refused connection is LibTorch's to decide (LibTorch 2.11 was seen past timeout + 5 s).
  while (!opts.isServer && !accepts_connections(rank.master_addr, rank.master_port) && clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c10::intrusive_ptr<c10d::Store> store;
  try {
    if (!opts.isServer && clock::now() >= deadline) throw std::runtime_error("nothing listens there");
    store = c10::make_intrusive<c10d::PrefixStore>(rank.store_prefix,
                                                   c10::make_intrusive<c10d::TCPStore>(rank.master_addr, opts));
  } catch (const std::exception& e) {
    if (opts.isServer)
      fail("rendezvous: rank 0 cannot serve the store at {} ({}): pick a free MASTER_PORT", where, first_line(e));
    fail(
        "rendezvous: rank {} found no store at {} within {} s: {}; start it, check its log, or raise "
        "ddp.rendezvous_timeout_s ({})",
        rank.rank, where, timeout_s,
        rank.launcher_store ? "torchrun's agent is not serving it" : "rank 0 never arrived", first_line(e));
  }

  std::vector<int> missing;
  missing.reserve(static_cast<std::size_t>(rank.world_size));
  for (int r = 0; r < rank.world_size; ++r) missing.push_back(r);
  try {
    store->set(arrived_key(rank.rank), std::vector<std::uint8_t>{1});
    for (;;) {
      std::erase_if(missing, [&](int r) { return store->check({arrived_key(r)}); });
      if (missing.empty()) break;
      if (clock::now() > deadline)
        fail(
            "rendezvous: rank(s) {} of {} did not arrive at {} within {} s: start them (or read their logs), or "
            "raise ddp.rendezvous_timeout_s",
            fmt::join(missing, ", "), rank.world_size, where, timeout_s);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    // Rank 0 serves the store: it gave up (its own deadline came first) or died.
    fail(
        "rendezvous: rank {} lost rank 0's store at {} while rank(s) {} had not arrived: rank 0 gave up or died; "
        "start every rank within ddp.rendezvous_timeout_s = {} s ({})",
        rank.rank, where, fmt::join(missing, ", "), timeout_s, first_line(e));
  }
  return store;
}

}  // namespace tandem::ddp
