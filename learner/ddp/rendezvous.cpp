#include "learner/ddp/rendezvous.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <thread>
#include <vector>

#include "common/error.hpp"
#include "learner/ddp/rank_env.hpp"

namespace tandem::ddp {
namespace {

std::string arrived_key(int rank) { return fmt::format("arrived/{}", rank); }

// The first line of a c10 error: its backtrace is noise in a one-line message.
std::string first_line(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
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
  c10::intrusive_ptr<c10d::Store> store;
  try {
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
