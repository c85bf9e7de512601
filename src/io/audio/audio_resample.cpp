// libsoxr driven the way python-soxr's soxr.resample drives it, with librosa's length fix.
#include "io/audio/audio_resample.h"

#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace gemmaserve::audio {

namespace {

struct SoxrDeleter {
  void operator()(soxr_t soxr) const { soxr_delete(soxr); }
};
using SoxrPtr = std::unique_ptr<std::remove_pointer_t<soxr_t>, SoxrDeleter>;

void check(soxr_error_t error) {
  // Only a bug or an allocation failure gets here: the rates were checked and the data are floats.
  if (error != nullptr) throw std::runtime_error(std::string("libsoxr: ") + error);
}

}  // namespace

std::vector<float> resample_audio(std::span<const float> samples, int from_rate, int to_rate) {
  if (from_rate <= 0 || to_rate <= 0) {
    throw InputError("cannot resample audio from " + std::to_string(from_rate) + " Hz to " +
                     std::to_string(to_rate) + " Hz");
  }
  if (from_rate == to_rate) return {samples.begin(), samples.end()};
  const double in_rate = from_rate, out_rate = to_rate;
  // librosa.resample's length, int(np.ceil(n * ratio)) in doubles, so it agrees to the sample.
  const auto length =
      static_cast<std::size_t>(std::ceil(double(samples.size()) * (out_rate / in_rate)));
  if (samples.empty()) return std::vector<float>(length);

  // python-soxr's recipe: soxr_quality_spec(SOXR_HQ, 0) (librosa's "soxr_hq"), float32 in and out.
  soxr_error_t error = nullptr;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  SoxrPtr soxr(soxr_create(in_rate, out_rate, 1, &error, &io, &quality, nullptr));
  check(error);

  // python-soxr's output room and input chunks (48000 output samples' worth per call).
  const auto room = static_cast<std::size_t>(double(samples.size()) * out_rate / in_rate + 1);
  const auto chunk = std::max<std::size_t>(1, static_cast<std::size_t>(48000 * in_rate / out_rate));
  std::vector<float> out(std::max(room, length), 0.0f);
  std::size_t done = 0;
  for (std::size_t at = 0; at < samples.size(); at += chunk) {
    std::size_t produced = 0;
    // A null idone makes soxr take the whole chunk, keeping what does not fit the output.
    check(soxr_process(soxr.get(), samples.data() + at, std::min(chunk, samples.size() - at),
                       nullptr, out.data() + done, room - done, &produced));
    done += produced;
  }
  std::size_t produced = 0;
  check(soxr_process(soxr.get(), nullptr, 0, nullptr, out.data() + done, room - done, &produced));
  done += produced;
  // librosa's fix_length: cut to `length`, or zeros after what soxr gave.
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(std::min(done, out.size())), out.end(), 0.0f);
  out.resize(length);
  return out;
}

}  // namespace gemmaserve::audio
