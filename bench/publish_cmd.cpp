#include "common/error.hpp"
#include "bench/bench_commands.hpp"
#include "bench/publish_options.hpp"
#include "bench/publish_reader.hpp"
#include "bench/publish_report.hpp"
#include "bench/publish_writer.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {
namespace {

int bench_publish(const PublishBenchOptions& o) {
  const ModelSize size = model_size(o);
  if (o.readers < 0 || o.readers > 64) fail("--readers {} is out of range: use 0..64", o.readers);
  if (o.device_readers < -1 || o.device_readers > 64)
    fail("--device-readers {} is out of range: use 0..64", o.device_readers);
  if (o.peer_gpu_readers < 0 || o.peer_gpu_readers > 64)
    fail("--peer-gpu-readers {} is out of range: use 0..64", o.peer_gpu_readers);
  if (o.seconds <= 0) fail("--seconds must be positive");
  return report_publish(o, size, measure_publish(o, size));
}

}  // namespace

void add_publish_commands(CLI::App& app) {
  static PublishBenchOptions o;
  auto* cmd = app.add_subcommand("publish", "weight publish latency: training blocked, D2H, visible to readers");
  cmd->add_option("--bytes", o.bytes, "flat model size (K, M, G or Ki, Mi, Gi suffixes)");
  cmd->add_option(
      "--model", o.model,
      "built-in size: resnet50 (102 MB), 600mb (605 MB in 256 tensors, default), 5gb, transformer (605 MB in 144 tensors; the peer builds a 12-layer 1024-wide TransformerEncoder)");
  cmd->add_option("--readers", o.readers, "reader processes")->capture_default_str();
  cmd->add_option("--device-readers", o.device_readers,
                  "same-GPU reader processes following the device slab through CUDA IPC (default: 1 on a GPU)");
  cmd->add_option("--peer-gpu-readers", o.peer_gpu_readers,
                  "device-slab readers on the other GPUs (--device + 1, + 2, ...), loading GPU to GPU")
      ->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "how long to publish")->capture_default_str();
  cmd->add_flag("--verify", o.verify, "fill every publish with its version's pattern and check every read");
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_flag("--chain", o.chain,
                "with --peer-gpu-readers: the writer also keeps a device slab on each of their GPUs, filled GPU to GPU "
                "by the pipelined chain; each reader loads from its own GPU's");
  cmd->add_flag("--peer", o.peer,
                "also run bench/peers/publish_peer.py (state_dict publish, pinned copy) and print ratios");
  cmd->add_option("--python", o.python, "Python with torch, for --peer")->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "path of publish_peer.py (default: found in the source tree)");
  cmd->add_flag("--cpu", o.cpu, "publish from host memory even when a GPU is visible");
  cmd->add_flag("--copy-in-call", o.copy_in_call,
                "CPU: copy inside publish() on the training thread instead of overlapping it (the old path)");
  cmd->add_option("--device", o.device, "GPU index")->capture_default_str();
  cmd->add_option("--interval-ms", o.interval_ms,
                  "time between publishes (default: 1.5 x one copy, >= 5 ms; 0: flat out)");
  cmd->add_option("--slots", o.slots, "slab slots")->capture_default_str();
  cli::on_run(cmd, [] { return bench_publish(o); });

  static ReaderOptions r;
  auto* reader = app.add_subcommand("publish-reader", "");  // one reader process of `publish`, started by it
  reader->group("");
  reader->add_option("--slab", r.slab)->required();
  reader->add_option("--result", r.result)->required();
  reader->add_option("--seconds", r.seconds);
  reader->add_flag("--verify", r.verify);
  reader->add_option("--cuda-device", r.cuda_device);
  cli::on_run(reader, [] { return run_reader(r); });
}

}  // namespace tandem::bench
