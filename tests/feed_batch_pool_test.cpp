// BatchPool (learner/feed/batch_pool.hpp): which batches a feed may refill in place. CPU tensors
// stand in for GPU ones; the rules do not depend on the device.
#include "tests/torch_doctest.hpp"

#include "learner/feed/batch_pool.hpp"

using tandem::feed::Batch;
using tandem::feed::BatchPool;

namespace {

constexpr std::uintptr_t kStream = 7, kOtherStream = 8;
const std::vector<std::int64_t> kX{4, 3}, kY{4};

Batch take(BatchPool& pool, std::uintptr_t stream = kStream, const std::vector<std::int64_t>& x = kX,
           const std::vector<std::int64_t>& y = kY) {
  return pool.take(x, torch::kFloat, y, torch::kLong, stream);
}

const void* memory(const Batch& b) { return b.x.data_ptr(); }

}  // namespace

TEST_CASE("a batch its consumer dropped is handed out again, the same memory and tensors") {
  BatchPool pool(3);
  const void* first = nullptr;
  const c10::TensorImpl* first_x = nullptr;
  {
    const Batch b = take(pool);
    first = memory(b);
    first_x = b.x.unsafeGetTensorImpl();
  }
  const Batch again = take(pool);
  CHECK(memory(again) == first);
  CHECK(again.x.unsafeGetTensorImpl() == first_x);
  CHECK(again.x.sizes() == torch::IntArrayRef(kX));
  CHECK(pool.size() == 1);
}

TEST_CASE("a batch still held, as a tensor, a view or a copy of its tensor, is never handed out again") {
  BatchPool pool(8);
  Batch held = take(pool);
  CHECK(memory(take(pool)) != memory(held));

  const Batch viewed = take(pool);
  const torch::Tensor row = viewed.x[0];  // a view keeps the memory, not the tensor
  const void* viewed_memory = memory(viewed);
  const torch::Tensor y_copy = viewed.y;  // another reference to the y tensor alone
  {
    const Batch dropped = viewed;  // NOLINT(performance-unnecessary-copy-initialization): a second holder, dropped
  }
  for (int i = 0; i < 4; ++i) CHECK(memory(take(pool)) != viewed_memory);
  CHECK(row.data_ptr() == viewed_memory);
  CHECK(y_copy.defined());
}

TEST_CASE("another stream, or other shapes, get a new batch; a full pool gives a free place up to it") {
  BatchPool pool(2);
  const void* a = memory(take(pool));
  CHECK(memory(take(pool, kOtherStream)) != a);  // on kStream it was free, but not on another stream
  CHECK(pool.size() == 2);

  const Batch short_step = take(pool, kStream, {2, 3}, {2});
  CHECK(short_step.x.size(0) == 2);
  CHECK(pool.size() == 2);  // in place of a free one

  Batch keep1 = take(pool), keep2 = take(pool), keep3 = take(pool);  // more held than the pool holds
  CHECK(pool.size() == 2);
  CHECK(memory(keep1) != memory(keep2));
  CHECK(memory(keep2) != memory(keep3));
}
