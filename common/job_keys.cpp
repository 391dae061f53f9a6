#include "common/job_keys.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/error.hpp"

namespace tandem {
namespace {

using T = ConfigType;

const std::vector<ConfigKey> kData = {
    {"data.name", T::string, "\"fmnist\"", "dataset cache /tandem.data.<name> to train and evaluate on; preload it first (`tandem data preload <name> --from <dir>`; tools/demo does it)"},
    {"data.from", T::string, "\"/usr/share/datasets/fashion-mnist\"", "where tools/demo preloads data.name from when the cache is missing (IDX, CIFAR-10 batches or .npy); the programs only read the cache"},
    {"data.mean", T::string, "\"0.2860\"", "input normalisation (x/255 - mean) / std: one value, or one per channel separated by commas"},
    {"data.std", T::string, "\"0.3530\"", "input normalisation divisor: one value, or one per channel separated by commas"},
    {"data.train_split", T::string, "\"train\"", "split the learner trains on"},
    {"data.test_split", T::string, "\"test\"", "split the evaluators evaluate on"},
};

const std::vector<ConfigKey> kModel = {
    {"model.name", T::string, "\"cnn\"", "mlp, cnn, resnet18 (32x32), actor_critic_mlp, or a TorchScript file path; input shape comes from the cache"},
    {"model.num_classes", T::integer, "10", "output classes (labels must be 0..num_classes-1)", 1, 1000000},
    {"model.seed", T::integer, "0", "seed of the initial weights (learner and actors build the same model)", 0, 9.0e15},
};

const std::vector<ConfigKey> kLearner = {
    {"learner.device", T::string, "\"cpu\"", "where the learner trains", {}, {}, {"cpu", "cuda"}},
    {"learner.feed", T::string, "\"host\"", "host: CPU worker threads gather batches (copied to the GPU on cuda); device: the whole split is gathered on the GPU (cuda only)", {}, {}, {"host", "device"}},
    {"learner.feed_workers", T::integer, "1", "HostFeed gather threads (0: min(8, cores))", 0, 64},
    {"learner.threads", T::integer, "1", "LibTorch intra-op threads of the learner (CPU training)", 1, 256},
    {"learner.batch_size", T::integer, "128", "samples per optimizer step", 1, 1048576},
    {"learner.epochs", T::real, "4", "training length in epochs of the train split (used when learner.steps = 0)", 0.0, 1.0e6},
    {"learner.steps", T::integer, "0", "training length in optimizer steps; 0: learner.epochs", 0, 1.0e12},
    {"learner.seed", T::integer, "0", "seed of the batch order", 0, 9.0e15},
    {"learner.optimizer", T::string, "\"sgd\"", "optimizer", {}, {}, {"sgd", "adam", "adamw"}},
    {"learner.lr", T::real, "0.05", "base learning rate (the schedule scales it)", 0.0, 100.0},
    {"learner.momentum", T::real, "0.9", "SGD momentum", 0.0, 1.0},
    {"learner.nesterov", T::boolean, "true", "SGD Nesterov momentum"},
    {"learner.weight_decay", T::real, "5e-4", "weight decay (L2 for sgd/adam, decoupled for adamw)", 0.0, 10.0},
    {"learner.schedule", T::string, "\"cosine\"", "learning-rate schedule: cosine to learner.min_lr at the last step, step (x gamma every step_size), constant", {}, {}, {"constant", "step", "cosine"}},
    {"learner.warmup_steps", T::integer, "100", "linear warmup steps", 0, 1.0e12},
    {"learner.min_lr", T::real, "0", "cosine floor", 0.0, 100.0},
    {"learner.step_size", T::integer, "1000", "step schedule: steps between decays", 1, 1.0e12},
    {"learner.gamma", T::real, "0.1", "step schedule: decay factor", 0.0, 1.0},
    {"learner.publish_every_steps", T::integer, "50", "publish the weights to the slab every N steps (and at the end); 0 = only by time", 0, 1.0e12},
    {"learner.publish_every_ms", T::real, "0", "also publish when this many ms passed; 0 = off", 0.0, 1.0e9},
    {"learner.publish_bf16", T::boolean, "false", "publish bfloat16 weights (half the bytes)"},
    {"learner.checkpoint_every_steps", T::integer, "500", "write <run_dir>/ckpt-<step>.safetensors every N steps (and at stop and end); 0 = only at stop and end", 0, 1.0e12},
    {"learner.keep_checkpoints", T::integer, "3", "checkpoints kept in the run dir (older ones are deleted)", 1, 1000000},
    {"learner.report_every_steps", T::integer, "20", "steps between metrics reports (loss, accuracy, samples/s) to the control block", 1, 1000000},
};

const std::vector<ConfigKey> kActor = {
    {"actor.role", T::string, "\"evaluator\"", "what the actors do: evaluator = evaluate each new weight version on data.test_split", {}, {}, {"evaluator"}},
    {"actor.device", T::string, "\"cpu\"", "where the actor runs its model", {}, {}, {"cpu", "cuda"}},
    {"actor.threads", T::integer, "1", "LibTorch intra-op threads of each actor", 1, 256},
    {"actor.batch_size", T::integer, "1000", "evaluation batch size", 1, 1048576},
    {"actor.max_samples", T::integer, "0", "evaluate the first N test samples only; 0 = the whole split", 0, 1.0e12},
    {"actor.min_interval_s", T::real, "20", "evaluate at most this often (the newest version wins); the final version is always evaluated", 0.0, 86400.0},
    {"actor.wait_weights_s", T::real, "300", "how long to wait for the learner's weight slab to appear", 0.0, 86400.0},
};

}  // namespace

std::span<const ConfigKey> data_keys() { return kData; }
std::span<const ConfigKey> model_keys() { return kModel; }
std::span<const ConfigKey> learner_keys() { return kLearner; }
std::span<const ConfigKey> actor_keys() { return kActor; }

std::vector<ConfigKey> program_schema() {
  std::vector<ConfigKey> keys;
  for (auto t : {data_keys(), model_keys(), learner_keys(), actor_keys()}) keys.insert(keys.end(), t.begin(), t.end());
  return keys;
}

std::vector<double> parse_number_list(const std::string& key, const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const char* begin = item.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    while (end && (*end == ' ' || *end == '\t')) ++end;
    if (end == begin || *end != '\0')
      fail("config: {} = \"{}\" is not a list of numbers: write e.g. \"0.5\" or \"0.49,0.48,0.45\"", key, text);
    if (!std::isfinite(v))
      fail("config: {} = \"{}\" holds {}: write finite numbers, e.g. \"0.5\" or \"0.49,0.48,0.45\"", key, text, v);
    out.push_back(v);
  }
  if (out.empty()) fail("config: {} is empty: write e.g. \"0.5\" or \"0.49,0.48,0.45\"", key);
  return out;
}

}  // namespace tandem
