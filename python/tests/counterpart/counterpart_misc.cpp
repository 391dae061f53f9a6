// tandem-py-counterpart feed | control | poke: the C++ feed's batches, a control block, a byte written into a cache.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "common/clock.hpp"
#include "learner/feed/host_feed.hpp"
#include "python/tests/counterpart/counterpart.hpp"
#include "shm/control_block.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/metric_fields.hpp"
#include "common/cli_actions.hpp"

namespace tandem::counterpart {
namespace {

struct FeedArgs {
  std::string dataset, split = "train", out;
  feed::FeedOptions o;
  std::uint64_t epoch = 0, steps = 1;
};

// The first `steps` steps of a CPU HostFeed from `epoch`: per step, per consumer, x's bytes then y's.
int run_feed(const FeedArgs& a) {
  const shm::DatasetCache cache = shm::DatasetCache::attach(a.dataset);
  feed::FeedOptions o = a.o;
  o.split = a.split;
  o.placement = feed::Placement::cpu;
  feed::HostFeed feed(cache, o, a.epoch);
  std::ofstream out(a.out, std::ios::binary);
  for (std::uint64_t s = 0; s < a.steps; ++s) {
    const feed::Step step = feed.next();
    for (const feed::Batch& b : step.batches) {
      out.write(static_cast<const char*>(b.x.data_ptr()), static_cast<std::streamsize>(b.x.nbytes()));
      out.write(static_cast<const char*>(b.y.data_ptr()), static_cast<std::streamsize>(b.y.nbytes()));
    }
  }
  std::cout << nlohmann::json{{"steps", a.steps}, {"length", feed.length()}}.dump() << std::endl;
  return 0;
}

nlohmann::json number(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json snapshot_json(const shm::ControlBlock& block, std::uint32_t row) {
  const shm::ProcessSnapshot s = block.snapshot(row);
  nlohmann::json j = {
      {"name", s.name()},
      {"pid", s.pid},
      {"state", static_cast<std::uint32_t>(s.state)},
      {"heartbeat_age_ms", (static_cast<double>(monotonic_ns()) - static_cast<double>(s.heartbeat_ns)) / 1e6},
      {"version_seen", s.version_seen},
      {"restarts", s.restarts}};
  if (s.metrics)
    for (const shm::MetricField& f : shm::kMetricFields) {  // every field, an unmeasured one null
      const std::string key(f.name);
      if (f.kind == shm::MetricKind::measure) j["metrics"][key] = number(shm::measure_of(*s.metrics, f));
      else j["metrics"][key] = shm::count_of(*s.metrics, f);
    }
  return j;
}

// Holds a control block as the launcher does until "quit": "snapshot ROW", "stop", "restarts ROW N".
int run_control(const std::string& job, std::uint32_t learners, std::uint32_t actors, const std::string& run_dir) {
  shm::ControlBlock block = shm::ControlBlock::create({job, learners, actors, run_dir});
  for (std::uint32_t r = 0; r < block.row_count(); ++r) block.begin_spawn(r, 0);
  std::cout << nlohmann::json{{"ready", block.segment().name()}}.dump() << std::endl;
  for (std::string line; (line = wait_line()) != "" && line != "quit";) {
    std::istringstream in(line);
    std::string what;
    std::uint32_t row = 0, n = 0;
    in >> what >> row >> n;
    if (what == "snapshot") std::cout << snapshot_json(block, row).dump() << std::endl;
    if (what == "stop") {
      block.request_stop(shm::StopReason::interrupted);
      std::cout << nlohmann::json{{"stop", true}}.dump() << std::endl;
    }
    if (what == "restarts") {
      block.begin_spawn(row, n);
      std::cout << nlohmann::json{{"restarts", n}}.dump() << std::endl;
    }
  }
  return 0;
}

// Writes `value` at byte `offset` of field `field` of a cache through a read-write mapping of its own.
int run_poke(const std::string& name, const std::string& field, std::uint64_t offset, int value) {
  const shm::DatasetCache cache = shm::DatasetCache::attach(name);
  const std::uint64_t at = static_cast<std::uint64_t>(cache.field(field).data - cache.segment().base()) + offset;
  shm::Segment seg = shm::Segment::attach(shm::dataset_segment_name(name), shm::Kind::dataset,
                                          shm::kDatasetLayoutVersion, shm::Segment::Access::read_write, "");
  seg.base()[at] = static_cast<std::byte>(value);
  std::cout << nlohmann::json{{"poked", at}}.dump() << std::endl;
  return 0;
}

}  // namespace

void add_feed_command(CLI::App& app) {
  static FeedArgs a;
  auto* c = app.add_subcommand("feed", "the C++ HostFeed's first steps, as bytes");
  c->add_option("--dataset", a.dataset)->required();
  c->add_option("--split", a.split);
  c->add_option("--batch", a.o.batch_size);
  c->add_option("--consumers", a.o.consumers);
  c->add_option("--seed", a.o.seed);
  c->add_option("--rank", a.o.rank);
  c->add_option("--world", a.o.world_size);
  c->add_option("--epoch", a.epoch);
  c->add_option("--steps", a.steps);
  c->add_option("--mean", a.o.mean);
  c->add_option("--std", a.o.stddev);
  c->add_flag("--drop-last", a.o.drop_last);
  c->add_option("--out", a.out)->required();
  cli::on_run(c, [] { return run_feed(a); });
}

void add_misc_commands(CLI::App& app) {
  static std::string job, run_dir = "/tmp", name, field = "x";
  static std::uint32_t learners = 1, actors = 1;
  static std::uint64_t offset = 0;
  static int value = 0;
  auto* c = app.add_subcommand("control", "create a control block and serve snapshot/stop commands");
  c->add_option("--job", job)->required();
  c->add_option("--learners", learners);
  c->add_option("--actors", actors);
  c->add_option("--run-dir", run_dir);
  cli::on_run(c, [] { return run_control(job, learners, actors, run_dir); });

  auto* p = app.add_subcommand("poke", "write a byte into a dataset cache's field");
  p->add_option("--dataset", name)->required();
  p->add_option("--field", field);
  p->add_option("--offset", offset);
  p->add_option("--value", value);
  cli::on_run(p, [] { return run_poke(name, field, offset, value); });
}

}  // namespace tandem::counterpart
