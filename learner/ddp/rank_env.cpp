#include "learner/ddp/rank_env.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "common/error.hpp"

namespace tandem::ddp {
namespace {

// A whole decimal number in [lo, hi]; anything else names the variable.
long parse_int(const char* var, std::string_view text, long lo, long hi) {
  long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    fail(
        "environment: {}=\"{}\" is not a whole number in {}..{}: fix or unset it (set by torchrun, Slurm or "
        "`tandem run`)",
        var, text, lo, hi);
  return v;
}

struct Env {
  const EnvLookup& lookup;
  std::optional<std::string> get(const char* var) const {
    const char* v = lookup(var);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }
  std::string need(const char* var, const char* because) const {
    auto v = get(var);
    if (!v)
      fail("environment: {} is set but {} is not: {}", because, var,
           "start the ranks with torchrun, srun or `tandem run`");
    return *v;
  }
  long integer(const char* var, const char* because, long lo, long hi) const {
    return parse_int(var, need(var, because), lo, hi);
  }
};

constexpr long kMaxWorld = 1 << 20;

void check_consistent(const RankInfo& r, const char* rank_var, const char* local_var) {
  if (r.rank >= r.world_size)
    fail("environment: {}={} is out of range for world size {}: ranks are 0..{}", rank_var, r.rank, r.world_size,
         r.world_size - 1);
  if (r.local_rank >= r.local_world_size)
    fail("environment: {}={} is out of range for {} local ranks: local ranks are 0..{}", local_var, r.local_rank,
         r.local_world_size, r.local_world_size - 1);
  if (r.local_world_size > r.world_size)
    fail("environment: {} local ranks exceed the world size {}: fix LOCAL_WORLD_SIZE / SLURM_NTASKS_PER_NODE",
         r.local_world_size, r.world_size);
  if (r.master_addr.empty()) fail("environment: MASTER_ADDR is empty: set it to rank 0's host name or address");
}

}  // namespace

std::string RankInfo::name() const {
  return fmt::format("rank {} of {} (local {} of {})", rank, world_size, local_rank, local_world_size);
}

RankInfo rank_from_env() {
  return rank_from_env([](const char* var) -> const char* { return std::getenv(var); });
}

RankInfo rank_from_env(const EnvLookup& lookup) {
  const Env env{lookup};
  RankInfo r;
  if (env.get("RANK")) {
    r.source = "torchrun";
    r.world_size = static_cast<int>(env.integer("WORLD_SIZE", "RANK", 1, kMaxWorld));
    r.rank = static_cast<int>(env.integer("RANK", "RANK", 0, kMaxWorld));
    // torchrun always sets the local pair; a hand-made environment with only RANK/WORLD_SIZE is one node.
    r.local_rank = env.get("LOCAL_RANK") ? static_cast<int>(env.integer("LOCAL_RANK", "RANK", 0, kMaxWorld)) : r.rank;
    r.local_world_size = env.get("LOCAL_WORLD_SIZE")
                             ? static_cast<int>(env.integer("LOCAL_WORLD_SIZE", "RANK", 1, kMaxWorld))
                             : r.world_size;
    if (r.world_size > 1) {
      r.master_addr = env.need("MASTER_ADDR", "WORLD_SIZE > 1");
      r.master_port = static_cast<std::uint16_t>(env.integer("MASTER_PORT", "WORLD_SIZE > 1", 1, 65535));
    }
    r.launcher_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
    if (auto restarts = env.get("TORCHELASTIC_RESTART_COUNT"))
      r.store_prefix = fmt::format("tandem/{}/", parse_int("TORCHELASTIC_RESTART_COUNT", *restarts, 0, kMaxWorld));
    check_consistent(r, "RANK", "LOCAL_RANK");
    return r;
  }
  if (env.get("SLURM_PROCID")) {
    r.source = "slurm";
    r.world_size = static_cast<int>(env.integer("SLURM_NTASKS", "SLURM_PROCID", 1, kMaxWorld));
    r.rank = static_cast<int>(env.integer("SLURM_PROCID", "SLURM_PROCID", 0, kMaxWorld));
    r.local_rank = static_cast<int>(env.integer("SLURM_LOCALID", "SLURM_PROCID", 0, kMaxWorld));
    r.local_world_size = r.world_size;
    if (auto per_node = env.get("SLURM_NTASKS_PER_NODE")) {
      // Slurm writes "4" or "4(x2)" (4 tasks on each of 2 nodes); the leading count is this layout's.
      const std::string_view text(*per_node);
      r.local_world_size = static_cast<int>(
          parse_int("SLURM_NTASKS_PER_NODE", text.substr(0, text.find('(')), 1, kMaxWorld));
    }
    if (auto addr = env.get("MASTER_ADDR")) r.master_addr = *addr;
    else if (auto launch = env.get("SLURM_LAUNCH_NODE_IPADDR")) r.master_addr = *launch;
    else if (r.world_size > 1)
      fail(
          "environment: under Slurm neither MASTER_ADDR nor SLURM_LAUNCH_NODE_IPADDR is set: export MASTER_ADDR "
          "(rank 0's host) in the batch script");
    if (auto port = env.get("MASTER_PORT"))
      r.master_port = static_cast<std::uint16_t>(parse_int("MASTER_PORT", *port, 1, 65535));
    check_consistent(r, "SLURM_PROCID", "SLURM_LOCALID");
    return r;
  }
  return r;
}

}  // namespace tandem::ddp
