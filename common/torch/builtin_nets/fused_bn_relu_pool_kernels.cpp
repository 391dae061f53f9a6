// Built once per instruction set (meson.build passes -DTANDEM_KERNEL_SET=<name> and its flags).
// Includes nothing with inline functions: see fused_bn_relu_pool_kernels.hpp.
//
// Channels go one vector register at a time (16 floats with AVX-512, 8 with AVX2, 4 with SSE or NEON)
// through GCC/Clang vector types, the remainder one at a time; one template per loop serves both widths.
#include "common/torch/builtin_nets/fused_bn_relu_pool_kernels.hpp"

#ifndef TANDEM_KERNEL_SET
#error "build with -DTANDEM_KERNEL_SET=<baseline|avx2|avx512>"
#endif

namespace tandem::fused_bn_relu_pool_kernels {
namespace {

// One register of the build's instruction set: wider types get split into several and GCC then
// lowers the selects and byte conversions lane by lane (measured: docs/results/HISTORY.md, "The cnn's blocks").
#ifndef TANDEM_KERNEL_LANES
#error "build with -DTANDEM_KERNEL_LANES=<floats per vector register: 4, 8 or 16>"
#endif
constexpr int kLanes = TANDEM_KERNEL_LANES;
using Vec = float __attribute__((vector_size(4 * kLanes)));
using IVec = std::int32_t __attribute__((vector_size(4 * kLanes)));
using Bytes = std::uint8_t __attribute__((vector_size(kLanes)));

struct Wide {  // one register of channels
  using V = Vec;
  using I = IVec;
  static constexpr std::int64_t kLanes = TANDEM_KERNEL_LANES;
  static I load_winner(const std::uint8_t* p) {
    Bytes b;
    __builtin_memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, IVec);
  }
  static void store_winner(std::uint8_t* p, I i) {
    const Bytes b = __builtin_convertvector(i, Bytes);
    __builtin_memcpy(p, &b, sizeof b);
  }
  static void add_lanes(double* to, V v) {
    for (int k = 0; k < kLanes; ++k) to[k] += v[k];
  }
};

struct Narrow {  // one channel
  using V = float;
  using I = std::int32_t;
  static I load_winner(const std::uint8_t* p) { return *p; }
  static void store_winner(std::uint8_t* p, I i) { *p = static_cast<std::uint8_t>(i); }
  static void add_lanes(double* to, V v) { *to += v; }
};

template <class V>
inline V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store(float* p, V v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// Calls body(Width{}, c) for every channel group: a register's worth at a time, then one at a time.
template <class Body>
inline void for_channel_groups(std::int64_t channels, Body body) {
  const std::int64_t wide_end = channels / Wide::kLanes * Wide::kLanes;
  for (std::int64_t c = 0; c < wide_end; c += Wide::kLanes) body(Wide{}, c);
  for (std::int64_t c = wide_end; c < channels; ++c) body(Narrow{}, c);
}

struct Window {  // the four input pixels under pooled output (row r, column ow)
  const float* at[4];
  Window(const float* x, const Geometry& g, std::int64_t r, std::int64_t ow) {
    const std::int64_t image = r / (g.h / 2), oh = r % (g.h / 2);
    at[0] = x + ((image * g.h + 2 * oh) * g.w + 2 * ow) * g.c;
    at[1] = at[0] + g.c;
    at[2] = at[0] + g.w * g.c;
    at[3] = at[2] + g.c;
  }
};

// Calls body(window, offset of its pooled output) for every pooled output of rows [first_row, end_row).
template <class Body>
inline void for_each_window(const float* x, const Geometry& g, std::int64_t first_row, std::int64_t end_row,
                            Body body) {
  const std::int64_t out_w = g.w / 2;
  for (std::int64_t r = first_row; r < end_row; ++r)
    for (std::int64_t ow = 0; ow < out_w; ++ow) body(Window(x, g, r, ow), (r * out_w + ow) * g.c);
}

void moments(const float* x, std::int64_t channels, std::int64_t first, std::int64_t end, double* sum, double* sumsq) {
  constexpr std::int64_t kBlock = 64;  // pixels summed in float before the double accumulators
  for (std::int64_t p0 = first; p0 < end; p0 += kBlock) {
    const std::int64_t p1 = end - p0 < kBlock ? end : p0 + kBlock;
    for_channel_groups(channels, [&](auto width, std::int64_t c) {
      using V = typename decltype(width)::V;
      V s{}, q{};
      for (std::int64_t p = p0; p < p1; ++p) {
        const V v = load<V>(x + p * channels + c);
        s += v;
        q += v * v;
      }
      decltype(width)::add_lanes(sum + c, s);
      decltype(width)::add_lanes(sumsq + c, q);
    });
  }
}

template <bool kWinners>
void normalize_relu_pool(const float* x, const Geometry& g, std::int64_t first_row, std::int64_t end_row,
                         const float* scale, const float* shift, float* out, std::uint8_t* winner, float* winner_x) {
  for_each_window(x, g, first_row, end_row, [&](const Window& win, std::int64_t o) {
    for_channel_groups(g.c, [&](auto width, std::int64_t c) {
      using W = decltype(width);
      using V = typename W::V;
      using I = typename W::I;
      const V s = load<V>(scale + c), t = load<V>(shift + c);
      V best_x = load<V>(win.at[0] + c);
      V best = best_x * s + t;
      I at{};
      for (int k = 1; k < 4; ++k) {
        const V v = load<V>(win.at[k] + c);
        const V z = v * s + t;
        const auto wins = (z > best) | (z != z);  // the first maximum wins; a NaN always does
        best = wins ? z : best;
        best_x = wins ? v : best_x;
        at = wins ? I{} + k : at;
      }
      const auto passes = (best > V{}) | (best != best);
      store<V>(out + o + c, passes ? best : V{});
      if constexpr (kWinners) {
        W::store_winner(winner + o + c, passes ? at : I{} + kNoWinner);
        store<V>(winner_x + o + c, best_x);
      }
    });
  });
}

void normalize_relu_pool_any(const float* x, const Geometry& g, std::int64_t first_row, std::int64_t end_row,
                             const float* scale, const float* shift, float* out, std::uint8_t* winner,
                             float* winner_x) {
  if (winner != nullptr) normalize_relu_pool<true>(x, g, first_row, end_row, scale, shift, out, winner, winner_x);
  else normalize_relu_pool<false>(x, g, first_row, end_row, scale, shift, out, nullptr, nullptr);
}

void winner_sums(const Geometry& g, std::int64_t first_row, std::int64_t end_row, const float* dp,
                 const std::uint8_t* winner, const float* winner_x, const float* mean, double* sum_dz,
                 double* sum_dz_centered) {
  const std::int64_t out_w = g.w / 2;
  for (std::int64_t r = first_row; r < end_row; ++r)
    for_channel_groups(g.c, [&](auto width, std::int64_t c) {
      using W = decltype(width);
      using V = typename W::V;
      using I = typename W::I;
      const V m = load<V>(mean + c);
      V dz_sum{}, dzc_sum{};
      for (std::int64_t ow = 0; ow < out_w; ++ow) {
        const std::int64_t o = (r * out_w + ow) * g.c + c;
        const V dz = W::load_winner(winner + o) == I{} + kNoWinner ? V{} : load<V>(dp + o);
        dz_sum += dz;
        dzc_sum += dz * (load<V>(winner_x + o) - m);
      }
      W::add_lanes(sum_dz + c, dz_sum);
      W::add_lanes(sum_dz_centered + c, dzc_sum);
    });
}

void input_gradient(const float* x, const Geometry& g, std::int64_t first_row, std::int64_t end_row, const float* dp,
                    const std::uint8_t* winner, const float* mean, const float* a, const float* b, const float* e,
                    float* dx) {
  for_each_window(x, g, first_row, end_row, [&](const Window& win, std::int64_t o) {
    for_channel_groups(g.c, [&](auto width, std::int64_t c) {
      using W = decltype(width);
      using V = typename W::V;
      using I = typename W::I;
      const I at = W::load_winner(winner + o + c);
      const V grad = load<V>(dp + o + c), va = load<V>(a + c), vb = load<V>(b + c), ve = load<V>(e + c);
      const V m = load<V>(mean + c);
      for (int k = 0; k < 4; ++k) {
        const V dz = at == I{} + k ? grad : V{};
        store<V>(dx + (win.at[k] - x) + c, va * dz + vb * (load<V>(win.at[k] + c) - m) + ve);
      }
    });
  });
}

}  // namespace

#define TANDEM_STRINGIFY(name) #name
#define TANDEM_NAME(name) TANDEM_STRINGIFY(name)
extern const Kernels TANDEM_KERNEL_SET;
const Kernels TANDEM_KERNEL_SET = {
    .isa = TANDEM_NAME(TANDEM_KERNEL_SET),
    .moments = moments,
    .normalize_relu_pool = normalize_relu_pool_any,
    .winner_sums = winner_sums,
    .input_gradient = input_gradient,
};

}  // namespace tandem::fused_bn_relu_pool_kernels
