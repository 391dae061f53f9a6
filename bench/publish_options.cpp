#include "bench/publish_options.hpp"

#include "common/error.hpp"
#include "common/units.hpp"

namespace tandem::bench {

ModelSize model_size(const PublishBenchOptions& o) {
  if (!o.bytes.empty() && !o.model.empty()) fail("pass either --bytes or --model, not both");
  if (!o.bytes.empty()) {
    const std::uint64_t bytes = parse_size(o.bytes, "--bytes");
    if (bytes < 16) fail("--bytes = {} is too small: publish at least 16 bytes", o.bytes);
    return {bytes, 256, "bytes"};
  }
  const std::string m = o.model.empty() ? "600mb" : o.model;
  // torchvision ResNet-50: 25,557,032 float32 parameters, 53,120 float32 BatchNorm statistics,
  // 53 int64 counters; 161 parameters + 159 buffers.
  if (m == "resnet50") return {25557032ull * 4 + 53120 * 4 + 53 * 8, 320, "resnet50"};
  if (m == "600mb") return {605000000ull, 256, "600mb"};
  if (m == "5gb") return {5000000000ull, 512, "5gb"};
  // torch.nn.TransformerEncoder, 12 layers of d_model 1024, 16 heads, feed-forward 4096: 12 tensors and
  // 12,596,224 float32 parameters per layer. The peer builds exactly that model (--shape transformer).
  if (m == "transformer") return {12ull * 12596224 * 4, 144, "transformer", "transformer"};
  fail("--model '{}' is not a built-in size: use resnet50, 600mb, 5gb or transformer, or --bytes N", m);
}

}  // namespace tandem::bench
