#include "kernels/cpu/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

namespace gemmaserve::cpu {
namespace {

using quant_detail::QuantActs;
using quant_detail::RangeKernel;

// Activation buffers reused across calls (grown, never shrunk): no allocation per call.
struct ActScratch {
  std::vector<int8_t> q;
  std::vector<float> d, xs;
  std::vector<int32_t> off, corr;
  std::vector<float> gathered;  // X in MatmulArgs::x_perm order (act-order modules only)
};

ActScratch& thread_scratch() {
  thread_local ActScratch scratch;
  return scratch;
}

// Round-to-nearest-even for |v| < 2^22 without a libm call (nearbyint is one at baseline ISA);
// larger values are clamped by the caller anyway.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float big = std::fabs(v) < 4194304.0f ? v : std::copysign(4194304.0f, v);
  return (big + kMagic) - kMagic;
}

}  // namespace

// Symmetric int8 per block of 32: d = max|x| / 127, q = round-to-nearest-even(x / d).
void quant_detail::quantize_act_row(const float* x, int64_t k, int8_t* q, float* d, int32_t* off,
                                    float* xs, int32_t* corr, int32_t corr_mult) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    int8_t* qb = q + b * 32;
    int32_t total = 0;
    for (int i = 0; i < 32; ++i) {
      qb[i] = static_cast<int8_t>(std::clamp(round_even(xb[i] * inv), -127.0f, 127.0f));
      total += qb[i];
    }
    d[b] = scale;
    act_block_extras(qb, scale, total, b, off, xs, corr, corr_mult);
  }
}

namespace {

void grow(ActScratch& s, size_t rows, int64_t k, bool off, bool xs, bool corr) {
  const size_t nb = static_cast<size_t>(k / 32);
  if (s.q.size() < rows * k) s.q.resize(rows * k);
  if (s.d.size() < rows * nb) s.d.resize(rows * nb);
  if (off && s.off.size() < rows * nb * 8) s.off.resize(rows * nb * 8);
  if (xs && s.xs.size() < rows * nb) s.xs.resize(rows * nb);
  if (corr && s.corr.size() < rows * nb) s.corr.resize(rows * nb);
}

QuantActs quantize_acts(const MatmulArgs& a, ThreadPool* pool, ActScratch& s, QuantIsa isa) {
  const int64_t nb = a.k / 32;
  const auto rows = static_cast<size_t>(a.t);
  const bool interleaved = a.w_layout == WeightLayout::kInterleaved16;
  const bool want_off = a.w_dtype == DType::kQ4_0 && !interleaved;
  const bool want_xs = a.w_dtype == DType::kQ4_K;
  // Interleaved Q8_0 / Q4_0 are stored unsigned (q + 128 or q + 8): each block starts from this
  // (Q4_K's values are unsigned already, its mins go through xs).
  const bool want_corr = interleaved && a.w_dtype != DType::kQ4_K;
  const int32_t corr_mult = a.w_dtype == DType::kQ8_0 ? -128 : -8;
  grow(s, rows, a.k, want_off, want_xs, want_corr);
  if (a.x_perm && s.gathered.size() < rows * a.k) s.gathered.resize(rows * a.k);
  const auto quantize_row = isa == QuantIsa::kAvx512Vnni ? quant_detail::quantize_act_row_avx512
                            : isa == QuantIsa::kPortable ? quant_detail::quantize_act_row
                                                         : quant_detail::quantize_act_row_avx2;
  auto quantize_rows = [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const float* x = a.x + t * a.ldx;
      if (a.x_perm) {
        float* row = s.gathered.data() + t * a.k;
        for (int64_t j = 0; j < a.k; ++j) row[j] = x[a.x_perm[j]];
        x = row;
      }
      quantize_row(x, a.k, s.q.data() + t * a.k, s.d.data() + t * nb,
                   want_off ? s.off.data() + t * nb * 8 : nullptr,
                   want_xs ? s.xs.data() + t * nb : nullptr,
                   want_corr ? s.corr.data() + t * nb : nullptr, corr_mult);
    }
  };
  if (pool && a.t >= 8) {
    pool->parallel_for(rows, quantize_rows);
  } else {
    quantize_rows(0, rows);
  }
  QuantActs acts;
  acts.q = s.q.data();
  acts.d = s.d.data();
  acts.off = want_off ? s.off.data() : nullptr;
  acts.xs = want_xs ? s.xs.data() : nullptr;
  acts.corr = want_corr ? s.corr.data() : nullptr;
  acts.k = a.k;
  return acts;
}

inline float load_f16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The canonical order spelled out in scalar code (see quant_matmul_internal.h).
float portable_dot(DType dtype, const std::byte* w, const QuantActs& a, int64_t t) {
  const int64_t nb = a.blocks();
  const int8_t* xq = a.q + t * a.k;
  const float* dx = a.d + t * nb;
  float acc[16] = {};
  float macc[8] = {};
  uint8_t sc[8] = {}, mn[8] = {};
  float d = 0.0f, dmin = 0.0f;
  const int64_t pairs = (nb + 1) / 2;
  for (int64_t pb = 0; pb < pairs; ++pb) {
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * pb + h;
      int32_t p[8] = {};
      float scale = 0.0f;
      if (b < nb) {
        const int8_t* x = xq + b * 32;
        if (dtype == DType::kQ8_0) {
          const std::byte* blk = w + b * kQ8_0BlockBytes;
          const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
          for (int i = 0; i < 32; ++i) p[i / 4] += q[i] * x[i];
          scale = load_f16(blk) * dx[b];
        } else if (dtype == DType::kQ4_0) {
          const std::byte* blk = w + b * kQ4_0BlockBytes;
          const auto* qs = reinterpret_cast<const uint8_t*>(blk + 2);
          for (int i = 0; i < 16; ++i) {
            p[i / 4] += ((qs[i] & 15) - 8) * x[i];
            p[(i + 16) / 4] += ((qs[i] >> 4) - 8) * x[i + 16];
          }
          scale = load_f16(blk) * dx[b];
        } else {
          const std::byte* blk = w + (b / 8) * kQ4KBlockBytes;
          const int s = static_cast<int>(b % 8);
          if (s == 0) {
            d = load_f16(blk);
            dmin = load_f16(blk + 2);
            for (int j = 0; j < 8; ++j) {
              q4k_scale_min(reinterpret_cast<const uint8_t*>(blk + 4), j, &sc[j], &mn[j]);
            }
          }
          const auto* q = reinterpret_cast<const uint8_t*>(blk + 16) + 32 * (s / 2);
          const int shift = (s % 2) * 4;
          for (int i = 0; i < 32; ++i) p[i / 4] += ((q[i] >> shift) & 15) * x[i];
          scale = (d * static_cast<float>(sc[s])) * dx[b];
          macc[s] = std::fma(dmin * static_cast<float>(mn[s]), a.xs[t * nb + b], macc[s]);
        }
      }
      for (int j = 0; j < 8; ++j) {
        acc[h * 8 + j] = std::fma(scale, static_cast<float>(p[j]), acc[h * 8 + j]);
      }
    }
  }
  const float sum = quant_detail::reduce16(acc);
  return dtype == DType::kQ4_K ? sum - quant_detail::reduce8(macc) : sum;
}

template <DType kType>
void portable_range(const MatmulArgs& args, const QuantActs& acts, int64_t n_begin, int64_t n_end) {
  const size_t row_bytes = dtype_row_bytes(kType, args.k);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const std::byte* w = static_cast<const std::byte*>(args.w) + static_cast<size_t>(n) * row_bytes;
    for (int64_t t = 0; t < args.t; ++t) {
      args.y[static_cast<size_t>(t) * args.ldy + n] = portable_dot(kType, w, acts, t);
    }
  }
}

}  // namespace

namespace quant_detail {

RangeKernel portable_kernel(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return portable_range<DType::kQ8_0>;
    case DType::kQ4_0:
      return portable_range<DType::kQ4_0>;
    case DType::kQ4_K:
      return portable_range<DType::kQ4_K>;
    default:
      return nullptr;
  }
}

}  // namespace quant_detail

bool quant_isa_supported(QuantIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case QuantIsa::kPortable:
      return true;
    case QuantIsa::kAvx2:
      return cpu_supports(CpuIsa::kAvx2);
    case QuantIsa::kAvxVnni:
      return cpu_supports(CpuIsa::kAvxVnni);
    case QuantIsa::kAvx512Vnni:
      return cpu_supports(CpuIsa::kAvx512) && f.avx512_vnni;
  }
  return false;
}

// The widest level allowed by the process-wide level (so GEMMASERVE_CPU_ISA lowers it too).
QuantIsa quant_best_isa() {
  const CpuIsa level = cpu_isa();
  if (level == CpuIsa::kAvx512 && quant_isa_supported(QuantIsa::kAvx512Vnni)) {
    return QuantIsa::kAvx512Vnni;
  }
  if (level >= CpuIsa::kAvxVnni && quant_isa_supported(QuantIsa::kAvxVnni)) {
    return QuantIsa::kAvxVnni;
  }
  if (level != CpuIsa::kPortable && quant_isa_supported(QuantIsa::kAvx2)) return QuantIsa::kAvx2;
  return QuantIsa::kPortable;
}

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kPortable:
      return "portable";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvxVnni:
      return "avxvnni";
    case QuantIsa::kAvx512Vnni:
      return "avx512-vnni";
  }
  return "?";
}

namespace {

void run_parts(std::span<const MatmulArgs> parts, ThreadPool* pool, QuantIsa isa) {
  const MatmulArgs& args = parts[0];
  if (!dtype_is_quantized(args.w_dtype)) {
    throw InputError(std::string("quant_matmul: weight dtype ") + dtype_name(args.w_dtype) +
                     " is not quantized");
  }
  if (args.k % dtype_block_elems(args.w_dtype) != 0) {
    throw InputError(std::string("quant_matmul: K = ") + std::to_string(args.k) +
                     " is not a multiple of the " + dtype_name(args.w_dtype) + " block size");
  }
  if (!quant_isa_supported(isa)) {
    throw InputError(std::string("quant_matmul: ISA path ") + quant_isa_name(isa) +
                     " is not supported by this CPU");
  }
  if (args.w_layout == WeightLayout::kInterleaved16) {
    for (const MatmulArgs& p : parts) {
      if (!interleave_supported(p.w_dtype, p.n, p.k > 0 ? p.k : dtype_block_elems(p.w_dtype))) {
        throw InputError(std::string("quant_matmul: interleaved ") + dtype_name(p.w_dtype) +
                         " weights with N = " + std::to_string(p.n) +
                         " (the layout needs Q8_0, Q4_0 or Q4_K and N a multiple of 16)");
      }
    }
  }
  if (args.t <= 0) return;
  if (args.k == 0) {
    for (const MatmulArgs& p : parts)
      for (int64_t t = 0; t < p.t; ++t)
        std::fill_n(p.y + static_cast<size_t>(t) * p.ldy, p.n, 0.0f);
    return;
  }
  const QuantActs acts = quantize_acts(args, pool, thread_scratch(), isa);
  RangeKernel kernel = nullptr;
  if (args.w_layout == WeightLayout::kInterleaved16) {
    switch (isa) {
      case QuantIsa::kAvx512Vnni:
        kernel = quant_detail::avx512_interleaved_kernel(args.w_dtype);
        break;
      case QuantIsa::kAvxVnni:
        kernel = quant_detail::avxvnni_interleaved_kernel(args.w_dtype);
        break;
      case QuantIsa::kAvx2:
        kernel = quant_detail::avx2_interleaved_kernel(args.w_dtype);
        break;
      case QuantIsa::kPortable:
        kernel = quant_detail::portable_interleaved_kernel(args.w_dtype);
        break;
    }
  } else {
    // AVX-VNNI adds nothing the row layout's 16-lane order could use: the AVX2 kernel runs.
    kernel = isa == QuantIsa::kAvx512Vnni ? quant_detail::avx512_kernel(args.w_dtype)
             : isa == QuantIsa::kPortable ? quant_detail::portable_kernel(args.w_dtype)
                                          : quant_detail::avx2_kernel(args.w_dtype);
  }
  detail::parallel_over_parts(
      parts, pool, [&](size_t p, int64_t b, int64_t e) { kernel(parts[p], acts, b, e); });
}

}  // namespace

void quant_matmul_isa(const MatmulArgs& args, ThreadPool* pool, QuantIsa isa) {
  run_parts(std::span<const MatmulArgs>(&args, 1), pool, isa);
}

void reserve_quant_act_scratch(int64_t rows, int64_t k) {
  grow(thread_scratch(), static_cast<size_t>(rows), k, true, true, true);
}

void quant_matmul(const MatmulArgs& args, ThreadPool* pool) {
  static const QuantIsa best = quant_best_isa();
  run_parts(std::span<const MatmulArgs>(&args, 1), pool, best);
}

void quant_matmul_group(std::span<const MatmulArgs> parts, ThreadPool* pool) {
  static const QuantIsa best = quant_best_isa();
  if (!parts.empty()) run_parts(parts, pool, best);
}

}  // namespace gemmaserve::cpu
