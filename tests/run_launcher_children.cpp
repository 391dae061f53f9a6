// The stand-ins `tandem run` starts in these tests (the config points run.learner_program and
// run.actor_program at this binary): a learner that trains, reports and checkpoints on a stop
// request, and an actor that evaluates until stopped and can hang or crash on request.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"
#include "shm/segment.hpp"
#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;
using shm::ControlClient;
using shm::ProcessMetrics;
using shm::ProcessState;
using tandem::test::child_options;
namespace fs = std::filesystem;

// Trains `steps` steps of `step_ms`, reporting metrics; on a stop request it "checkpoints" (writes
// checkpoint.txt into the run directory) and exits 0. It also creates a segment of the job, as the
// weight slab's writer would, to prove the launcher removes what its children made.
TANDEM_CHILD("fake-learner") {
  auto opt = child_options();
  const int steps = std::stoi(opt["steps"]);
  const int step_ms = std::stoi(opt["step_ms"]);
  auto client = ControlClient::from_env();
  if (!client) return 3;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the launcher reads lines as they come, as from the real programs
  if (std::getenv("RANK") == nullptr || std::getenv("MASTER_PORT") == nullptr ||
      std::getenv("TANDEM_CONFIG") == nullptr)
    return 4;
  shm::Segment slab = shm::Segment::create(shm::job_segment_name(client->job(), shm::Kind::weights), shm::Kind::weights,
                                           1, 4096, "fix");
  slab.mark_ready();
  slab.persist();
  shm::HeartbeatThread beat(*client, 50ms);
  client->set_state(ProcessState::running);
  std::printf("learner %s starting\n", client->name().c_str());
  for (int step = 1; step <= steps; ++step) {
    if (client->should_stop()) {
      client->set_state(ProcessState::stopping);
      std::ofstream(fs::path(client->run_dir()) / "checkpoint.txt") << "step " << step << "\n";
      std::printf("stop requested: checkpoint at step %d\n", step);
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    ProcessMetrics m;
    m.step = static_cast<std::uint64_t>(step);
    m.version = static_cast<std::uint64_t>(step / 10);
    m.loss = 1.0 / step;
    m.samples_per_s = 1000.0;
    client->report(m);
    if (step % 10 == 0) std::printf("step %d\n", step);
  }
  std::printf("training done\n");
  return 0;
}

// Evaluates until stopped, beating by hand each loop (so sleeping stops its heartbeat). It "evaluates"
// the learner's latest reported version, and on a stop (unless the job failed) that version once more,
// as the real evaluator does with the final weights.
// mode=hang-once: its first incarnation stops beating after ~0.5 s; crash: exits 3 after 0.2 s;
// quit: exits 0 after 0.2 s, its duty undone.
TANDEM_CHILD("fake-actor") {
  auto opt = child_options();
  auto client = ControlClient::from_env();
  if (!client) return 3;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);      // the launcher reads lines as they come, as from the real programs
  if (std::getenv("RANK") != nullptr) return 4;  // torchrun's variables are for learners only
  client->set_state(ProcessState::running);
  std::printf("actor %u running (restart %u)\n", client->index(), client->restarts());
  auto learner_version = [&] {
    const auto m = client->block().read_metrics(0);
    return m ? m->version : 0;
  };
  for (int i = 0;; ++i) {
    if (client->should_stop()) {
      client->set_state(ProcessState::stopping);
      if (client->block().stop_reason() != shm::StopReason::failure) {
        ProcessMetrics m;
        m.version = learner_version();
        client->report(m);
        std::printf("actor evaluated version %llu\n", static_cast<unsigned long long>(m.version));
      }
      std::printf("actor stopping\n");
      return 0;
    }
    client->heartbeat();
    if (opt["mode"] == "hang-once" && client->restarts() == 0 && i == 25) {
      std::printf("hanging now\n");
      std::this_thread::sleep_for(1h);
    }
    if (opt["mode"] == "quit" && i == 10) {
      std::printf("quitting early\n");
      return 0;
    }
    if (opt["mode"] == "crash" && i == 10) {
      std::fprintf(stderr, "simulated crash\n");
      return 3;
    }
    ProcessMetrics m;
    m.step = static_cast<std::uint64_t>(i);
    m.version = learner_version();
    m.accuracy = 0.5 + 0.001 * i;
    m.loss = 0.7;
    client->report(m);
    std::this_thread::sleep_for(20ms);
  }
}
