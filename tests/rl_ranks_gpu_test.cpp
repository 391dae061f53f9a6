// RL learner ranks over NCCL, one GPU each (rl_learner_test.cpp's CPU case on GPUs): 2 ranks, each on
// its own actor's ring, learn as one rank over both rings. Needs 2 GPUs and a CUDA LibTorch with NCCL;
// elsewhere the binary, or the case, says why it skips.
#include "tests/torch_doctest.hpp"

#include "tests/case_check.hpp"
#include "tests/harness.hpp"
#include "tests/rl_learner_harness.hpp"

TANDEM_MULTI_GPU_TEST_BINARY(2);

TEST_CASE("rl learner: 2 GPU ranks over NCCL, each on its own actor's ring, end with one GPU rank's weights" *
          doctest::timeout(240)) {
#if defined(TANDEM_TORCH_CUDA) && defined(TANDEM_HAVE_NCCL)
  tandem::test::check_ranks_learn_as_one_rank("cuda", 1e-4);
#else
  TANDEM_SKIP("needs 2 GPUs, a CUDA LibTorch and a build with NCCL");
#endif
}
