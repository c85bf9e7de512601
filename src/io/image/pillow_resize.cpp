// See pillow_resize.h. Built with -ffp-contract=off (CMakeLists.txt): the filter weights must be
// computed with the same double roundings as Pillow's C code.
#include "io/image/pillow_resize.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace gemmaserve::image {
namespace {

// 8 bits for the result, 2 for the overshoot of the negative lobes, the rest for the fraction.
constexpr int kPrecisionBits = 32 - 8 - 2;

double box(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

double bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming(double x) {
  if (x < 0.0) x = -x;
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * std::numbers::pi;
  return std::sin(x) / x * (0.54 + 0.46 * std::cos(x));
}

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * std::numbers::pi;
  return std::sin(x) / x;
}

double lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0; }

struct Filter {
  double (*weight)(double);
  double support;
};

Filter filter_of(PillowFilter f) {
  switch (f) {
    case PillowFilter::kBox:
      return {box, 0.5};
    case PillowFilter::kBilinear:
      return {bilinear, 1.0};
    case PillowFilter::kHamming:
      return {hamming, 1.0};
    case PillowFilter::kBicubic:
      return {bicubic, 2.0};
    case PillowFilter::kLanczos:
      return {lanczos, 3.0};
  }
  throw std::invalid_argument("pillow_resize: unknown filter");
}

// One output sample's taps: source index `first`, `count` fixed-point weights from `weights`.
struct Taps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<std::int32_t> weights;  // out_size x ksize
};

Taps precompute(int in_size, int out_size, const Filter& filter) {
  const float in0 = 0.0f, in1 = static_cast<float>(in_size);
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  Taps taps;
  taps.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(std::size_t(out_size) * taps.ksize, 0);
  std::vector<double> k(taps.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = filter.weight((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
      const double scaled = k[x] * (1 << kPrecisionBits);
      taps.weights[std::size_t(xx) * taps.ksize + x] =
          static_cast<std::int32_t>(k[x] < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    taps.first[xx] = xmin;
    taps.count[xx] = xmax;
  }
  return taps;
}

std::uint8_t clip8(std::int32_t sum) {
  const std::int32_t v = sum >> kPrecisionBits;  // arithmetic shift, as Pillow's lookup index
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

std::vector<std::uint8_t> pillow_resize(std::span<const std::uint8_t> rgb, int width, int height,
                                        int out_width, int out_height, PillowFilter filter) {
  if (width <= 0 || height <= 0 || out_width <= 0 || out_height <= 0 ||
      rgb.size() != std::size_t(width) * height * 3) {
    throw std::invalid_argument("pillow_resize: bad sizes " + std::to_string(width) + "x" +
                                std::to_string(height) + " -> " + std::to_string(out_width) + "x" +
                                std::to_string(out_height));
  }
  if (width == out_width && height == out_height) return {rgb.begin(), rgb.end()};
  const Filter f = filter_of(filter);
  const Taps horiz = precompute(width, out_width, f);
  Taps vert = precompute(height, out_height, f);
  constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);

  // Horizontal pass over the source rows the vertical pass will read.
  std::vector<std::uint8_t> temp;
  std::span<const std::uint8_t> src = rgb;
  int src_width = width;
  if (out_width != width) {
    const int first_row = vert.first[0];
    const int last_row = vert.first[out_height - 1] + vert.count[out_height - 1];
    for (int& f : vert.first) f -= first_row;
    const int rows = last_row - first_row;
    temp.resize(std::size_t(out_width) * rows * 3);
    for (int y = 0; y < rows; ++y) {
      const std::uint8_t* in = rgb.data() + std::size_t(y + first_row) * width * 3;
      std::uint8_t* out = temp.data() + std::size_t(y) * out_width * 3;
      for (int xx = 0; xx < out_width; ++xx) {
        const std::int32_t* k = &horiz.weights[std::size_t(xx) * horiz.ksize];
        const std::uint8_t* p = in + std::size_t(horiz.first[xx]) * 3;
        std::int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
        for (int x = 0; x < horiz.count[xx]; ++x) {
          s0 += p[x * 3 + 0] * k[x];
          s1 += p[x * 3 + 1] * k[x];
          s2 += p[x * 3 + 2] * k[x];
        }
        out[xx * 3 + 0] = clip8(s0);
        out[xx * 3 + 1] = clip8(s1);
        out[xx * 3 + 2] = clip8(s2);
      }
    }
    src = temp;
    src_width = out_width;
  }
  if (out_height == height) return temp;

  std::vector<std::uint8_t> out(std::size_t(out_width) * out_height * 3);
  const std::size_t stride = std::size_t(src_width) * 3;
  for (int yy = 0; yy < out_height; ++yy) {
    const std::int32_t* k = &vert.weights[std::size_t(yy) * vert.ksize];
    const std::uint8_t* col0 = src.data() + std::size_t(vert.first[yy]) * stride;
    std::uint8_t* o = out.data() + std::size_t(yy) * out_width * 3;
    for (int xx = 0; xx < out_width; ++xx) {
      std::int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
      const std::uint8_t* p = col0 + std::size_t(xx) * 3;
      for (int y = 0; y < vert.count[yy]; ++y) {
        s0 += p[y * stride + 0] * k[y];
        s1 += p[y * stride + 1] * k[y];
        s2 += p[y * stride + 2] * k[y];
      }
      o[xx * 3 + 0] = clip8(s0);
      o[xx * 3 + 1] = clip8(s1);
      o[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

}  // namespace gemmaserve::image
