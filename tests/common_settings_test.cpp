// The typed settings of a job (common/settings/): every table parsed once, the rules between tables
// checked by the one function the launcher and the programs both call, and the former key spellings
// still loading as their new keys.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/settings/job.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

Config config_of(const std::string& toml, std::vector<std::string> set = {}) {
  return Config::parse(toml, "job.toml", set, program_schema(), {}, renamed_keys());
}

std::string refusal(const std::string& toml, std::vector<std::string> set, const JobShape& shape) {
  try {
    (void)JobSettings::parse(config_of(toml, std::move(set)), shape);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

const char* kPpo =
    "[learner]\nalgo = \"ppo\"\n[model]\nname = \"actor_critic_mlp\"\n[actor]\nrole = \"rollout\"\n"
    "evaluators = 1\n[env]\nenvs = 4\n[rl]\nrollout_steps = 8\nslots_per_update = 2\n"
    "slots_per_ring = 2\nminibatches = 2\n";

}  // namespace

TEST_CASE("settings: every table parses from the defaults, and the schema holds no key twice") {
  const std::vector<ConfigKey> schema = program_schema();
  for (std::size_t i = 0; i < schema.size(); ++i)
    for (std::size_t j = i + 1; j < schema.size(); ++j) CHECK(schema[i].key != schema[j].key);
  const JobSettings s = JobSettings::parse(config_of(""), {});
  CHECK(s.learner.algo == Algo::supervised);
  CHECK_FALSE(s.learner.device.cuda);
  CHECK(s.supervised.batch_size == 128);
  CHECK(s.schedule.name == "cosine");
  CHECK(s.publish.device_slab);
  CHECK(s.ddp.cpu_collectives == DdpSettings::CpuCollectives::shm);
  CHECK(s.data.mean == std::vector<double>{0.2860});
  CHECK(s.rollout_actors == 0);
}

TEST_CASE("settings: each former spelling loads as its new key, with a note naming it") {
  const std::vector<ConfigKey> schema = program_schema();
  auto declared = [&](std::string_view key) {
    for (const auto& k : schema)
      if (k.key == key) return true;
    return false;
  };
  for (const RenamedKey& r : renamed_keys()) {
    CAPTURE(r.old_key);
    CHECK_FALSE(declared(r.old_key));
    REQUIRE(declared(r.key));
  }
  const Config c = config_of("[learner]\ngamma = 0.5\nstep_size = 7\nbucket_mb = 8\nkeep_checkpoints = 2\n",
                             {"learner.publish_bf16=true", "learner.lr=0.2"});
  const JobSettings s = JobSettings::parse(c, {});
  CHECK(s.schedule.decay_factor == doctest::Approx(0.5));
  CHECK(s.schedule.decay_every_steps == 7);
  CHECK(s.ddp.bucket_mb == doctest::Approx(8));
  CHECK(s.checkpoint.keep == 2);
  CHECK(s.publish.bf16);
  CHECK(s.optimizer.lr == doctest::Approx(0.2));
  REQUIRE(c.notes().size() == 6);
  CHECK(c.notes()[0] ==
        "note: config job.toml: learner.bucket_mb is now ddp.bucket_mb: rename it (the old name loads "
        "until the next release)");
  CHECK(c.notes()[5] ==
        "note: config --set: learner.lr is now optimizer.lr: rename it (the old name loads until the "
        "next release)");
}

TEST_CASE("settings: a device is cpu, cuda or cuda:N, for the learner and the actors alike") {
  for (const char* key : {"learner.device", "actor.device"}) {
    CAPTURE(key);
    const std::string k = key;
    CHECK_FALSE(DeviceSetting::parse(k, "cpu").cuda);
    CHECK(DeviceSetting::parse(k, "cuda").gpu(2) == 2);
    CHECK(DeviceSetting::parse(k, "cuda:0").gpu(2) == 0);
    CHECK(DeviceSetting::parse(k, "cuda:3").str() == "cuda:3");
    for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CUDA", "cuda:0:1"}) {
      CAPTURE(bad);
      const std::string message = test::error_of([&] { (void)DeviceSetting::parse(k, bad); });
      CHECK(message == "config: " + k + " = \"" + bad +
                           "\" is not a device: write \"cpu\", \"cuda\" or \"cuda:N\" "
                           "with N a GPU index, e.g. \"cuda:0\"");
    }
  }
  const JobSettings s = JobSettings::parse(config_of("", {"learner.device=cuda:1", "actor.device=cuda:0"}), {});
  CHECK(s.learner.device.index == 1);
  CHECK(s.actor.device.index == 0);
}

TEST_CASE("settings: the rules between tables, for the shape the launcher or a program sees, name the key") {
  struct Row {
    const char* toml;
    std::vector<std::string> set;
    JobShape shape;
    std::string expect;  // "" = accepted
  };
  const std::vector<Row> rows = {
      {"", {}, {}, ""},
      {"",
       {"supervised.batch_size=127"},
       {.learners = 2, .local_learners = 2},
       "config: supervised.batch_size = 127 does not divide among the 2 learner ranks"},
      {"", {"supervised.feed=device"}, {}, "config: supervised.feed = \"device\" needs learner.device = \"cuda\""},
      {"", {"supervised.feed=device", "learner.device=cuda:0"}, {}, ""},
      {"",
       {"learner.device=cuda:1"},
       {.learners = 2, .local_learners = 2},
       "config: learner.device = \"cuda:1\" names one GPU for this node's 2 learner ranks: use \"cuda\""},
      {"", {"actor.role=rollout"}, {.actors = 2}, "config: actor.role = \"rollout\" needs a learner that learns"},
      {"", {"optimizer.momentum=0"}, {}, "config: optimizer.nesterov = true needs optimizer.momentum above 0"},
      {"", {"optimizer.lr=0"}, {}, "config: optimizer.lr = 0 does not train"},
      {"", {"data.mean=0.5,0.5"}, {}, "config: data.mean has 2 values and data.std 1"},
      {"", {"data.std=0"}, {}, "config: data.std = \"0\" holds 0: every entry must be positive"},
      {"", {"env.plugin=libx.so"}, {}, "config: env.plugin = \"libx.so\" is set but env.name = \"cartpole\""},
      {"", {"env.name=plugin"}, {}, "config: env.name = \"plugin\" but env.plugin is empty"},
      {"", {"env.threads=8"}, {}, ""},
      {"", {"env.threads=9"}, {}, "config: env.threads = 9 is more than env.envs = 8"},
      {"",
       {"env.name=python", "env.python=m:C", "env.threads=2"},
       {},
       "config: env.threads = 2 but the Python rollout"},
      {kPpo, {}, {.actors = 2}, ""},
      {kPpo, {}, {}, ""},                                                 // a learner started by hand: one ring
      {kPpo, {}, {.learners = 2, .local_learners = 2, .actors = 3}, ""},  // a rollout actor per rank
      {kPpo,
       {},
       {.learners = 2, .local_learners = 2, .actors = 2},
       "config: the 1 rollout actors do not divide among run.learners = 2 ranks (each consumes its own actors' "
       "rings): make run.actors - actor.evaluators a multiple of 2"},
      {kPpo,
       {"rl.slots_per_update=3", "rl.slots_per_ring=3"},
       {.learners = 2, .local_learners = 2, .actors = 3},
       "config: rl.slots_per_update = 3 does not divide among run.learners = 2 ranks"},
      {kPpo,
       {},
       {.learners = 2, .local_learners = 1, .actors = 3},
       "config: learner.algo = \"ppo\" runs its 2 learner ranks on one node"},
      {kPpo,
       {},
       {.learners = 2, .local_learners = 2, .actors = 3, .deterministic = true},
       "config: run.deterministic runs one RL learner rank, not 2: set run.learners = 1"},
      {kPpo, {"actor.role=evaluator"}, {.actors = 2}, "config: learner.algo = \"ppo\" learns from rollout actors"},
      {kPpo, {}, {.actors = 1}, "config: actor.evaluators = 1 leaves no rollout actor among run.actors = 1"},
      {kPpo, {"model.name=mlp"}, {.actors = 2}, "config: model.name = \"mlp\" has no value head"},
      {kPpo, {"model.hidden=256", "model.shared_trunk=true"}, {.actors = 2}, ""},
      {"",
       {"model.hidden=256"},
       {},
       "config: model.hidden and model.shared_trunk shape actor_critic_mlp, not model.name = \"cnn\""},
      {kPpo,
       {"rl.slots_per_update=5"},
       {.actors = 3},
       "config: rl.slots_per_update = 5 is more than the 2 rings x rl.slots_per_ring = 2 can hold"},
      {kPpo,
       {},
       {.actors = 4, .deterministic = true},
       "config: run.deterministic needs rl.slots_per_update = 2 to be a multiple of the 3 rollout actors: set it to 3"},
      {kPpo,
       {"rl.slots_per_update=6"},
       {.actors = 3, .deterministic = true},
       "config: run.deterministic: each update takes 3 slots from every actor but rl.slots_per_ring = 2"},
      {kPpo, {"rl.minibatches=65"}, {.actors = 2}, "config: rl.minibatches = 65 is more than the 64 samples"},
      {kPpo,
       {"learner.algo=vtrace", "rl.minibatches=9"},
       {.actors = 2},
       "config: rl.minibatches = 9 is more than the 8 trajectories"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.toml);
    CAPTURE(row.set.empty() ? std::string() : row.set.front());
    const std::string message = refusal(row.toml, row.set, row.shape);
    if (row.expect.empty()) CHECK(message == "");
    else CHECK(message.starts_with(row.expect));
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("settings: a supervised run's length divides each rank's shard by its share of the batch") {
  struct Row {
    std::uint32_t learners;
    std::uint64_t samples, batch;
    std::int64_t steps_per_epoch;
  };
  // 60000 samples, batch 128: 468 steps an epoch whether 1 or 2 ranks share the batch (not 234).
  for (const Row& row : {Row{1, 60000, 128, 468}, Row{2, 60000, 128, 468}, Row{4, 60000, 128, 468},
                         Row{2, 1537, 2, 768}, Row{3, 1000, 30, 33}}) {
    CAPTURE(row.learners);
    const JobShape shape{.learners = row.learners, .local_learners = row.learners};
    const JobSettings s = JobSettings::parse(config_of("", {"supervised.epochs=1", "schedule.warmup_steps=10",
                                                            fmt::format("supervised.batch_size={}", row.batch)}),
                                             shape);
    const SupervisedBudget b = supervised_budget(s, "train", row.samples);
    CHECK(b.rank_batch == row.batch / row.learners);
    CHECK(b.steps_per_epoch == static_cast<std::uint64_t>(row.steps_per_epoch));
    CHECK(b.total_steps == row.steps_per_epoch);
  }
  const JobSettings two = JobSettings::parse(config_of("", {"supervised.epochs=1", "schedule.warmup_steps=300"}),
                                             {.learners = 2, .local_learners = 2});
  CHECK(supervised_budget(two, "train", 60000).total_steps == 468);
  const JobSettings long_warmup = JobSettings::parse(
      config_of("", {"supervised.epochs=1", "schedule.warmup_steps=468"}), {});
  CHECK(test::error_of([&] { (void)supervised_budget(long_warmup, "train", 60000); }) ==
        "config: schedule.warmup_steps = 468 is not below the run's 468 steps: lower it or train longer");
  const JobSettings none = JobSettings::parse(config_of("", {"supervised.epochs=0.001"}), {});
  CHECK(test::error_of([&] { (void)supervised_budget(none, "train", 60000); }) ==
        "config: supervised.epochs = 0.001 gives no step (468 per epoch): raise it or set supervised.steps");
}

TEST_CASE("settings: publish.device_slab defaults to auto and accepts only auto or off, naming both") {
  CHECK(JobSettings::parse(config_of(""), {}).publish.device_slab);
  CHECK_FALSE(JobSettings::parse(config_of("", {"publish.device_slab=off"}), {}).publish.device_slab);
  const std::string message = test::error_of([] { (void)config_of("[publish]\ndevice_slab = \"on\"\n"); });
  CHECK(message.find("publish.device_slab = \"on\" is not one of: auto, off") != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

TEST_CASE("settings: number lists refuse NaN and infinities, naming the key") {
  for (const char* text : {"nan", "0.5, inf", "-inf"}) {
    CAPTURE(text);
    CHECK(test::error_of([&] { (void)parse_number_list("data.std", text); }).find("data.std = \"") !=
          std::string::npos);
  }
}
