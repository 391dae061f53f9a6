#include <torch/nn/functional/loss.h>
#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <cstring>

#include "actor/evaluator.hpp"
#include "common/error.hpp"
#include "common/torch/models.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {
using tandem::test::error_of;

// A committed cache of 300 random 1x28x28 uint8 images with labels 0..9 (train 200, test 100),
// removed from /dev/shm at scope exit.
struct SyntheticCache {
  std::string name = test::unique_name("evaltest");
  SyntheticCache() {
    shm::DatasetSpec spec{.name = name,
                          .source = "test",
                          .format = "synthetic",
                          .num_samples = 300,
                          .fields = {{"x", shm::DType::u8, {1, 28, 28}}, {"y", shm::DType::i64, {}}},
                          .splits = {{"train", 0, 200}, {"test", 200, 300}}};
    shm::DatasetWriter w = shm::DatasetWriter::create(spec, false);
    torch::manual_seed(11);
    torch::Tensor x = torch::randint(256, {300, 1, 28, 28}, torch::kUInt8);
    torch::Tensor y = torch::randint(10, {300}, torch::kInt64);
    std::memcpy(w.field_data(0), x.data_ptr(), x.numel());
    std::memcpy(w.field_data(1), y.data_ptr(), y.numel() * 8);
    w.commit(0, 1);
  }
  ~SyntheticCache() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

}  // namespace

TEST_CASE("evaluator: accuracy and loss equal a direct computation over a copy of the split") {
  SyntheticCache made;
  shm::DatasetCache cache = shm::DatasetCache::attach(made.name);
  Model model = Model::create({.name = "cnn", .seed = 4});
  Evaluator eval(cache, {.split = "test", .batch_size = 64, .mean = {0.5}, .std = {0.25}});
  CHECK(eval.num_samples() == 100);
  EvalResult r = eval.evaluate(model);
  CHECK(r.samples == 100);
  CHECK(r.seconds > 0);
  CHECK(model.is_training());  // put back as it was

  // Direct: copy the test split out of the cache, normalise it whole, one forward.
  const auto xf = cache.field("x");
  const auto yf = cache.field("y");
  torch::Tensor x = torch::empty({100, 1, 28, 28}, torch::kUInt8);
  torch::Tensor y = torch::empty({100}, torch::kInt64);
  std::memcpy(x.data_ptr(), xf.data + 200 * xf.stride, 100 * xf.stride);
  std::memcpy(y.data_ptr(), yf.data + 200 * yf.stride, 100 * yf.stride);
  model.eval();
  torch::NoGradGuard no_grad;
  torch::Tensor logits = model.forward((x.to(torch::kFloat32) / 255.0 - 0.5) / 0.25);
  const double accuracy = logits.argmax(1).eq(y).to(torch::kFloat64).mean().item<double>();
  const double loss = torch::nn::functional::cross_entropy(logits, y).item<double>();
  CHECK(r.accuracy == doctest::Approx(accuracy).epsilon(1e-12));
  CHECK(r.loss == doctest::Approx(loss).epsilon(1e-5));

  Evaluator first(cache, {.split = "test", .batch_size = 1000, .mean = {0.5}, .std = {0.25}, .max_samples = 10});
  CHECK(first.evaluate(model).samples == 10);
}

TEST_CASE("evaluator: a stop request ends an evaluation within one batch, marked incomplete") {
  SyntheticCache made;
  shm::DatasetCache cache = shm::DatasetCache::attach(made.name);
  Model model = Model::create({.name = "cnn", .seed = 4});
  Evaluator eval(cache, {.split = "test", .batch_size = 10, .mean = {0.5}, .std = {0.25}});
  int asked = 0;
  const EvalResult stopped = eval.evaluate(model, [&] { return ++asked > 3; });  // stop after 3 batches
  CHECK_FALSE(stopped.complete);
  CHECK(asked == 4);  // asked once per batch, and no batch after the request
  CHECK(stopped.samples == 30);
  CHECK(model.is_training());  // put back as it was
  const EvalResult whole = eval.evaluate(model, [] { return false; });
  CHECK(whole.complete);
  CHECK(whole.samples == 100);
}

TEST_CASE("evaluator: batches are views of the shared-memory mapping, not copies of the dataset") {
  SyntheticCache made;
  shm::DatasetCache cache = shm::DatasetCache::attach(made.name);
  Evaluator eval(cache, {});
  const auto* base = reinterpret_cast<const std::byte*>(cache.segment().base());
  const auto* end = base + cache.segment().size();
  torch::Tensor x = eval.inputs_view(10, 74);
  torch::Tensor y = eval.labels_view(10, 74);
  const auto* xp = static_cast<const std::byte*>(x.data_ptr());
  const auto* yp = static_cast<const std::byte*>(y.data_ptr());
  CHECK(xp >= base);
  CHECK(xp + x.nbytes() <= end);
  CHECK(yp >= base);
  CHECK(yp + y.nbytes() <= end);
  CHECK(xp == cache.field("x").data + 210 * 784);  // test split starts at sample 200
  CHECK(x.sizes() == torch::IntArrayRef({64, 1, 28, 28}));
  CHECK((x.scalar_type() == torch::kUInt8));
  CHECK((y.scalar_type() == torch::kInt64));
  CHECK(y[0].item<std::int64_t>() == *reinterpret_cast<const std::int64_t*>(cache.field("y").data + 210 * 8));
}

TEST_CASE("evaluator: a missing split, bad normalisation or a misfit model is a one-line error") {
  SyntheticCache made;
  shm::DatasetCache cache = shm::DatasetCache::attach(made.name);
  CHECK_FALSE(error_of([&] { Evaluator(cache, {.split = "validation"}); }).empty());
  CHECK(error_of([&] {
          Evaluator(cache, {.mean = {0.1, 0.2}});
        }).find("mean has 2 values for 1 channels") != std::string::npos);
  CHECK(error_of([&] { Evaluator(cache, {.batch_size = 0}); }).find("batch size 0") != std::string::npos);
  Evaluator eval(cache, {});
  Model rgb = Model::create({.name = "cnn", .channels = 3, .height = 32, .width = 32});
  CHECK(error_of([&] { eval.evaluate(rgb); }).find("takes 3x32x32 inputs, the dataset's samples are 1x28x28") !=
        std::string::npos);
}
