// The four loops of the fused BatchNorm -> ReLU -> 2x2 max-pool (fused_bn_relu_pool.hpp), on raw
// channels-last float32 memory, built once per instruction set and picked at run time, as ATen
// builds its own CPU kernels.
//
// Why per instruction set: the loops are memory-bound only when vectorised; scalar (or SSE) code
// makes them compute-bound. The build compiles fused_bn_relu_pool_kernels.cpp once per set (baseline,
// AVX2+FMA, AVX-512 on x86-64) into its own namespace; that file includes no header with inline
// functions, so no AVX-512 copy of a shared inline function can stand in for the baseline's.
//
// Each loop covers a range of rows (pooled output row r = image * H/2 + oh reads input rows 2 oh
// and 2 oh + 1 of that image); the caller splits the rows over threads. Sums are added into the
// caller's double arrays: one set per chunk, so chunks run concurrently.
// Window positions are numbered in max_pool2d's scan order: 0 top-left, 1 top-right, 2 bottom-left,
// 3 bottom-right; kNoWinner marks a window whose maximum ReLU zeroed (no gradient flows through it).
#pragma once

#include <cstdint>
#include <span>

namespace tandem::fused_bn_relu_pool_kernels {

inline constexpr std::uint8_t kNoWinner = 4;

struct Geometry {  // [n, c, h, w], channels-last, h and w even
  std::int64_t n, c, h, w;
};

struct Kernels {
  const char* isa;
  // sum[c] += x, sumsq[c] += x * x over pixels [first, end) (pixel p starts at x + p * c).
  void (*moments)(const float* x, std::int64_t channels, std::int64_t first, std::int64_t end, double* sum,
                  double* sumsq);
  // out = relu(max over each window of x * scale + shift); winner and winner_x (both null, or both
  // pooled-sized): the winning position and its x, which is all the backward's sums need of x.
  void (*normalize_relu_pool)(const float* x, const Geometry& g, std::int64_t first_row, std::int64_t end_row,
                              const float* scale, const float* shift, float* out, std::uint8_t* winner,
                              float* winner_x);
  // Over the winners: sum_dz[c] += dp, sum_dz_centered[c] += dp * (winner_x - mean).
  void (*winner_sums)(const Geometry& g, std::int64_t first_row, std::int64_t end_row, const float* dp,
                      const std::uint8_t* winner, const float* winner_x, const float* mean, double* sum_dz,
                      double* sum_dz_centered);
  // dx = a * dz + b * (x - mean) + e, dz being dp at the window's winner and 0 elsewhere.
  void (*input_gradient)(const float* x, const Geometry& g, std::int64_t first_row, std::int64_t end_row,
                         const float* dp, const std::uint8_t* winner, const float* mean, const float* a, const float* b,
                         const float* e, float* dx);
};

// One per build of fused_bn_relu_pool_kernels.cpp; avx2 and avx512 exist on x86-64 builds only.
extern const Kernels baseline;
#if defined(__x86_64__)
extern const Kernels avx2, avx512;
#endif

// The kernel sets this CPU runs, widest first; never empty (the baseline runs everywhere).
// Thread-safe: decided once, from the CPU's feature flags.
std::span<const Kernels* const> runnable();

}  // namespace tandem::fused_bn_relu_pool_kernels
