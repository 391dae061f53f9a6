// `tandem run` refusing a job whose programs could only fail at start: the model, the dataset cache,
// its splits and labels, the normalisation, batch sizes, NaN values and the toml++ inputs that
// crash its parser. Each is one line naming the key, exit 1, no run directory, nothing in /dev/shm.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/file_descriptor.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

namespace {

using namespace tandem;
namespace fs = std::filesystem;

// x: 1x8x8 uint8, y: labels i % 10 (or `bad_label` at the first test sample); train 1536, test 512.
struct SmallCache {
  std::string name = test::unique_name("validate");
  explicit SmallCache(std::int64_t bad_label = 0) {
    const std::uint64_t n = 2048;
    auto w = shm::DatasetWriter::create({.name = name,
                                         .source = "generated",
                                         .format = "test",
                                         .num_samples = n,
                                         .fields = {{"x", shm::DType::u8, {1, 8, 8}}, {"y", shm::DType::i64, {}}},
                                         .splits = {{"train", 0, 1536}, {"test", 1536, n}}},
                                        false);
    auto* y = reinterpret_cast<std::int64_t*>(w.field_data(1));
    for (std::uint64_t i = 0; i < n; ++i) y[i] = static_cast<std::int64_t>(i % 10);
    if (bad_label != 0) y[1536] = bad_label;
    w.commit(0, 1);
  }
  ~SmallCache() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

// Rewrites split `index` of the cache's descriptor to [begin, end) and reseals the header checksum,
// as a hand-made segment would: DatasetWriter refuses such splits.
void forge_split(const std::string& cache, std::size_t index, std::uint64_t begin, std::uint64_t end) {
  const std::string path = "/dev/shm/" + shm::dataset_segment_name(cache);
  const FileDescriptor fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  std::array<std::byte, shm::kHeaderBytes> header{};
  REQUIRE(::pread(fd.get(), header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()));
  const std::size_t at = shm::kDescriptorOffset + offsetof(shm::DatasetDescriptor, splits) +
                         index * sizeof(shm::SplitDesc) + offsetof(shm::SplitDesc, begin);
  std::memcpy(header.data() + at, &begin, sizeof begin);
  std::memcpy(header.data() + at + sizeof begin, &end, sizeof end);
  const std::uint64_t sum = shm::header_checksum(header.data());
  std::memcpy(header.data() + offsetof(shm::SegmentHeader, header_checksum), &sum, sizeof sum);
  REQUIRE(::pwrite(fd.get(), header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()));
}

// A job config whose programs are /bin/true (one learner, one evaluator): nothing may start when the
// check fails.
struct ValidateJob {
  test::TempDir dir;
  std::string job = test::unique_name("validate-job");
  std::string config(const std::string& data, const std::string& extra = "") const {
    std::string path = dir.file("job.toml");
    std::ofstream(path) << fmt::format(R"({}[run]
job = "{}"
unique_id = false
actors = 1
learner_program = "/bin/true"
actor_program = "/bin/true"
runs_dir = "{}"
status = "off"
[data]
name = "{}"
[supervised]
steps = 100
[schedule]
warmup_steps = 10
[actor]
batch_size = 256
)",
                                       extra, job, (dir / "runs").string(), data);
    return path;
  }
  bool left_nothing() const {
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      if (e.path().filename().string().find(job) != std::string::npos) return false;
    return !fs::exists(dir / "runs" / job);
  }
};

test::CommandResult run_tandem(const std::string& config, const std::vector<std::string>& set) {
  std::string cmd = test::tandem_binary() + " run '" + config + "'";
  for (const auto& s : set) cmd += " --set '" + s + "'";
  return test::run_command(cmd);
}

void check_refused(const test::CommandResult& r, const std::string& expect, const ValidateJob& job) {
  CAPTURE(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find(expect) != std::string::npos);
  CHECK(r.output.find('\n') == r.output.size() - 1);  // exactly one line
  CHECK(job.left_nothing());
}

}  // namespace

TEST_CASE("tandem run: a job the programs would refuse at start is one line naming the key, before anything exists" *
          doctest::timeout(120)) {
  SmallCache cache;
  ValidateJob job;
  const std::string config = job.config(cache.name);
  const std::string not_zip = job.dir.file("model.pt");
  std::ofstream(not_zip) << "not a TorchScript archive";
  struct Row {
    std::vector<std::string> set;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{"model.num_classes=2"}, "model.num_classes = 2 but data.train_split = \"train\" holds label 2"},
      {{"model.name=vgg"},
       "model.name = \"vgg\" is neither a built-in (mlp, cnn, resnet18, actor_critic_mlp, actor_critic_cnn)"},
      {{"model.name=" + not_zip}, "is not a TorchScript file (not a zip archive)"},
      {{"data.name=" + cache.name + "-missing"}, "data.name = \"" + cache.name + "-missing\": "},
      {{"data.train_split=training"},
       "data.train_split = \"training\": dataset cache '" + cache.name + "' has no split"},
      {{"data.test_split=val"}, "data.test_split = \"val\": "},
      {{"data.std=0"}, "data.std = \"0\" holds 0: every entry must be positive"},
      {{"data.mean=0.5,0.5"}, "data.mean has 2 values"},
      {{"supervised.batch_size=100000"},
       "supervised.batch_size = 100000 is larger than split 'train' (1536 samples): lower it"},
      {{"run.learners=2", "supervised.batch_size=127"},
       "supervised.batch_size = 127 does not divide among the 2 learner ranks"},
      {{"actor.batch_size=1000"}, "actor.batch_size = 1000 is larger than split 'test' (512 samples): lower it"},
      {{"optimizer.lr=nan"}, "optimizer.lr = nan is not a finite number"},
      {{"actor.wait_weights_s=nan"}, "actor.wait_weights_s = nan is not a finite number"},
      {{"supervised.feed=device"}, "supervised.feed = \"device\" needs learner.device = \"cuda\""},
      {{"supervised.steps=0", "supervised.epochs=0"}, "supervised.epochs = 0 gives no step"},
      {{"schedule.warmup_steps=100"}, "schedule.warmup_steps = 100 is not below the run's 100 steps"},
      {{"schedule.name=step", "schedule.decay_factor=0"}, "schedule.decay_factor = 0 stops training"},
      {{"optimizer.momentum=0"}, "optimizer.nesterov = true needs optimizer.momentum above 0"},
      {{"learner.device=cuda:x"}, "learner.device = \"cuda:x\" is not a device: write \"cpu\", \"cuda\" or \"cuda:N\""},
      {{"run.learners=2", "learner.device=cuda:1"},
       "learner.device = \"cuda:1\" names one GPU for this node's 2 learner ranks"},
      {{"actor.role=rollout", "run.actors=1"}, "actor.role = \"rollout\" needs a learner that learns from experience"},
      {{"env.plugin=libenv.so"}, "env.plugin = \"libenv.so\" is set but env.name = \"cartpole\""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.set.front());
    check_refused(run_tandem(config, row.set), row.expect, job);
  }
  // The same config without a bad key gets past the check (the job then starts /bin/true).
  const auto ok = run_tandem(config, {});
  CAPTURE(ok.output);
  CHECK(ok.output.find(fmt::format("job {}: 1 learner, 1 actor", job.job)) != std::string::npos);
}

TEST_CASE("tandem run: a label outside model.num_classes in the test split is refused before anything starts" *
          doctest::timeout(60)) {
  SmallCache cache(-7);
  ValidateJob job;
  check_refused(run_tandem(job.config(cache.name), {}),
                "data.test_split = \"test\" of data.name = \"" + cache.name + "\" holds label -7 at sample 1536", job);
  SmallCache wide(12);
  check_refused(run_tandem(job.config(wide.name), {}),
                "model.num_classes = 10 but data.test_split = \"test\" holds label 12", job);
}

TEST_CASE("tandem run: config text that crashes toml++ 3.3.0 is one line naming file:line" * doctest::timeout(60)) {
  SmallCache cache;
  ValidateJob job;
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"[?x]\n", "job.toml:1: malformed table header"},
      {"\xc2\xa7 = 1\n", "job.toml:1: a non-ASCII character outside a quoted string or comment"},
      {"s = \"\"\"\\\n\xc2\xa7\"\"\"\n", "job.toml:2: a non-ASCII character right after a line-ending backslash"},
  };
  for (const auto& [text, expect] : rows) {
    const std::string& input = text;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(input);
    check_refused(run_tandem(job.config(cache.name, text), {}), expect, job);
  }
}

TEST_CASE("tandem run: a split outside the cache or reversed is refused before anything starts" *
          doctest::timeout(60)) {
  struct Row {
    std::size_t split;
    std::uint64_t begin, end;
    std::string key;
  };
  for (const Row& row : {Row{0, 0, 75000, "data.train_split"}, Row{1, 5, 3, "data.test_split"}}) {
    CAPTURE(row.key);
    SmallCache cache;
    forge_split(cache.name, row.split, row.begin, row.end);
    ValidateJob job;
    const auto r = run_tandem(job.config(cache.name), {});
    CAPTURE(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find('\n') == r.output.size() - 1);
    // The launcher names the split key; an attach that refuses such a cache itself names data.name.
    CHECK((r.output.find(row.key + " = \"") != std::string::npos ||
           r.output.find("config: data.name = \"" + cache.name + "\": ") != std::string::npos));
    CHECK(job.left_nothing());
  }
}

// The learner divides each rank's shard by the rank's share of the batch; the launcher once divided it
// by the whole batch and refused runs as too short for their warmup: 2 ranks of 64 samples from 768-sample
// shards take 12 steps an epoch, not 768 / 128 = 6. The former key spellings keep the config loadable by
// a launcher from before the settings moved to their own tables.
TEST_CASE(
    "tandem run: data-parallel ranks' run length is the learner's: each shard over the rank's share of the batch" *
    doctest::timeout(60)) {
  SmallCache cache;  // 1536 train samples
  ValidateJob job;
  const std::string config = job.dir.file("old-spelling.toml");
  std::ofstream(config) << fmt::format(R"([run]
job = "{}"
unique_id = false
actors = 0
learner_program = "/bin/true"
runs_dir = "{}"
status = "off"
[data]
name = "{}"
[learner]
batch_size = 128
steps = 0
epochs = 1
[actor]
batch_size = 256
)",
                                       job.job, (job.dir / "runs").string(), cache.name);
  const auto ok = run_tandem(config, {"run.learners=2", "learner.warmup_steps=11"});
  CAPTURE(ok.output);
  CHECK(ok.output.find(fmt::format("job {}: 2 learners", job.job)) != std::string::npos);
  const auto refused = run_tandem(config, {"run.learners=2", "learner.warmup_steps=12"});
  CAPTURE(refused.output);
  CHECK(refused.status == 1);
  CHECK(refused.output.find("warmup_steps = 12 is not below the run's 12 steps") != std::string::npos);
}

// A config for a PPO job whose programs are /bin/true: one rollout actor and one evaluator.
std::string rl_config(const ValidateJob& job) {
  std::string path = job.dir.file("rl.toml");
  std::ofstream(path) << fmt::format(R"([run]
job = "{}"
unique_id = false
actors = 2
learner_program = "/bin/true"
actor_program = "/bin/true"
runs_dir = "{}"
status = "off"
[learner]
algo = "ppo"
[model]
name = "actor_critic_mlp"
[actor]
role = "rollout"
evaluators = 1
)",
                                     job.job, (job.dir / "runs").string());
  return path;
}

TEST_CASE(
    "tandem run: an RL job its learner or actors would refuse at start is one line naming the key, before "
    "anything exists" *
    doctest::timeout(60)) {
  ValidateJob job;
  const std::string config = rl_config(job);
  struct Row {
    std::vector<std::string> set;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{"run.learners=2"}, "the 1 rollout actors do not divide among run.learners = 2 ranks"},
      {{"actor.role=evaluator"}, "learner.algo = \"ppo\" learns from rollout actors: set actor.role = \"rollout\""},
      {{"actor.evaluators=2"}, "actor.evaluators = 2 leaves no rollout actor among run.actors = 2"},
      {{"model.name=cnn"}, "model.name = \"cnn\" has no value head: learner.algo = \"ppo\" needs"},
      {{"env.name=plugin"}, "env.name = \"plugin\" but env.plugin is empty: set it to the path of your env's shared"},
      {{"env.name=plugin", "env.plugin=/nonexistent/libenv.so"},
       "env.plugin = \"/nonexistent/libenv.so\" is not a file"},
      {{"env.name=cartpol"},
       "env.name = \"cartpol\" is not one of: cartpole, acrobot, mountaincar, pendulum, hopper, walker2d, halfcheetah, "
       "ant, humanoid, breakout, null, plugin"},
      {{"run.deterministic=true", "run.actors=3", "rl.slots_per_update=3"},
       "run.deterministic needs rl.slots_per_update = 3 to be a multiple of the 2 rollout actors: set it to 2"},
      {{"rl.slots_per_update=9"}, "rl.slots_per_update = 9 is more than the 1 rings x rl.slots_per_ring = 4 can hold"},
      {{"rl.minibatches=100000"}, "rl.minibatches = 100000 is more than the 512 samples of one update"},
      {{"learner.algo=vtrace", "rl.minibatches=9"}, "rl.minibatches = 9 is more than the 8 trajectories"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.set.front());
    check_refused(run_tandem(config, row.set), row.expect, job);
  }
  const auto ok = run_tandem(config, {});
  CAPTURE(ok.output);
  CHECK(ok.output.find(fmt::format("job {}: 1 learner, 2 actors", job.job)) != std::string::npos);
}

TEST_CASE("tandem run: examples/cartpole-ppo.toml with run.learners = 2 is refused before anything starts" *
          doctest::timeout(60)) {
  ValidateJob job;
  const std::string example = test::source_root() + "/examples/cartpole-ppo.toml";
  check_refused(
      run_tandem(example, {"run.learners=2", "run.job=" + job.job, "run.runs_dir=" + (job.dir / "runs").string(),
                           "run.learner_program=/bin/true", "run.actor_program=/bin/true"}),
      "config: the 1 rollout actors do not divide among run.learners = 2 ranks (each consumes its own actors' rings): "
      "make run.actors - actor.evaluators a multiple of 2",
      job);
}
