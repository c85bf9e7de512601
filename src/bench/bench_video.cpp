// `gemmaserve bench video`: a video through the decoder and the Engine, timed from outside as a
// client sees it: the clip's decode, the sampled frames' preprocessing, one frame as an image and
// the whole video alone, then decode streams with a video request arriving beside them.
#include "bench/bench_video.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>

#include "bench/bench_kernels.h"
#include "bench/media_bench.h"
#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "io/video/synthetic_clip.h"
#include "io/video/video_decode.h"
#include "model/gemma4_image_processor.h"
#include "server/shared/chat_video.h"

namespace gemmaserve {
namespace {

const char* kVideoUsage =
    "usage: gemmaserve bench video [--model DIR | --preset NAME (e2b)] [--tokenizer PATH]\n"
    "                              [--seconds S (30)] [--width W (1280)] [--height H (720)]\n"
    "                              [--fps F (30)] [--keyframe-seconds K (2)] [--runs N (3)]\n"
    "                              [--streams N (1)] [--tokens-before N (16)] [engine options]\n"
    "--model DIR: a Gemma 4 checkpoint with a vision tower; without it, random bf16 weights of\n"
    "--preset (make-test-model --seed 0), written to a temporary folder and removed after. The\n"
    "frames' timestamps need a tokenizer: the checkpoint's, or --tokenizer (a Gemma 4\n"
    "tokenizer.json or GGUF; the presets have none).\n"
    "The clip is made here: S seconds of W x H at F fps, H.264 (libx264 veryfast, a keyframe\n"
    "every K seconds) in MP4, a moving pattern (~7 Mbit/s at 720p). Its frames are sampled as the\n"
    "server samples them (--media-io-kwargs; 32 by default), 70 soft tokens each. Prints the\n"
    "CPU and the clip, then each of --runs runs and their medians:\n"
    "  DECODE: the clip decoded as the server decodes it: seconds, real-time factor (seconds per\n"
    "    second of clip), frames sampled and decoded, seeks;\n"
    "  PREPROCESS: the sampled frames resized and patchified as the engine does;\n"
    "  IMAGE: one sampled frame as an image request alone (max_tokens 1): encoder seconds\n"
    "    (preprocessing and tower, the engine's count) and time to first token;\n"
    "  VIDEO: the video request alone: encoder seconds, per frame and against IMAGE, encoder\n"
    "    steps, time to first token;\n"
    "  GAPS: --streams greedy decode streams; once each has --tokens-before tokens the clip\n"
    "    arrives, is decoded on this thread (as a server's request handler decodes it) and\n"
    "    added; the streams' inter-token gaps before and from its arrival to its first token.\n"
    "Prefix caching and the encoder cache are off (every run encodes); --max-model-len defaults\n"
    "to 4096 and the KV cache to 1 GiB.\n";

struct Options {
  MediaBenchOptions common;
  double seconds = 30;
  int width = 1280;
  int height = 720;
  int fps = 30;
  double keyframe_seconds = 2;
};

// The benchmark's options from the parsed flags.
Options options_from_flags(const ArgParser& p) {
  Options o;
  o.common = media_bench_options(p, 3, "vision_config", "vision tower", "bench video");
  o.seconds = p.get_double("--seconds", o.seconds);
  if (!(o.seconds > 0)) {
    throw InputError("--seconds must be positive, got " + p.get("--seconds").value_or(""));
  }
  o.width = p.get_positive_int("--width", o.width);
  o.height = p.get_positive_int("--height", o.height);
  if (o.width % 2 != 0 || o.height % 2 != 0) {
    throw InputError("--width and --height must be even (H.264 in 4:2:0), got " +
                     std::to_string(o.width) + "x" + std::to_string(o.height));
  }
  o.fps = p.get_positive_int("--fps", o.fps);
  o.keyframe_seconds = p.get_double("--keyframe-seconds", o.keyframe_seconds);
  if (!(o.keyframe_seconds > 0)) {
    throw InputError("--keyframe-seconds must be positive, got " +
                     p.get("--keyframe-seconds").value_or(""));
  }
  if (o.common.model.empty() && o.common.engine.tokenizer.empty()) {
    throw InputError("bench video: the " + o.common.preset +
                     " preset has no tokenizer, and the frames' timestamps need one: pass "
                     "--tokenizer (a Gemma 4 tokenizer.json or GGUF)");
  }
  return o;
}

Options parse_options(const std::vector<std::string>& args, bool* help) {
  ArgParser p;
  add_media_bench_flags(p);
  p.value("--seconds")
      .value("--width")
      .value("--height")
      .value("--fps")
      .value("--keyframe-seconds");
  const ConfigFileFlags config = parse_with_config_file(p, args, 0);
  *help = p.get_flag("--help");
  if (*help) return {};
  return config.explaining([&] { return options_from_flags(p); });
}

video::ClipSpec clip_spec(const Options& o) {
  video::ClipSpec spec;
  spec.width = o.width;
  spec.height = o.height;
  spec.frames = std::max(1, static_cast<int>(std::lround(o.seconds * o.fps)));
  spec.rate_num = o.fps;
  spec.keyframe_interval = std::max(1, static_cast<int>(std::lround(o.keyframe_seconds * o.fps)));
  spec.encoder_threads = 0;
  return spec;
}

video::DecodedVideo decode(const std::vector<std::uint8_t>& clip, const VideoLoadOptions& load) {
  return video::decode_video(clip, load.sampling, load.limits);
}

// The clip decoded `runs` times; the last run's frames.
video::DecodedVideo bench_decode(const std::vector<std::uint8_t>& clip,
                                 const VideoLoadOptions& load, int runs) {
  std::vector<double> seconds;
  video::DecodedVideo decoded;
  for (int i = 0; i < runs; ++i) {
    const BenchClock::time_point t0 = BenchClock::now();
    decoded = decode(clip, load);
    seconds.push_back(seconds_of(BenchClock::now() - t0));
    const video::VideoInfo& info = decoded.info;
    if (i == 0) {
      print_line("VIDEO %s in %s, %dx%d, %lld frames at %.3f fps (%.2f s)\n", info.codec.c_str(),
                 info.container.c_str(), info.width, info.height,
                 static_cast<long long>(info.total_frames), info.fps, info.duration);
    }
    print_line(
        "DECODE run %d/%d: %.3f s (real-time factor %.4f): %zu of %lld frames sampled, %lld "
        "decoded, %d seek(s)\n",
        i + 1, runs, seconds.back(), seconds.back() / info.duration, decoded.frames.size(),
        static_cast<long long>(info.total_frames),
        static_cast<long long>(decoded.stats.frames_decoded), decoded.stats.seeks);
  }
  print_line("DECODE median of %d runs: %.3f s, real-time factor %.4f (%.2f s of clip)\n", runs,
             median(seconds), median(seconds) / decoded.info.duration, decoded.info.duration);
  return decoded;
}

// The frames as the engine preprocesses a video's frames, on this thread.
void bench_preprocess(const Engine& engine, const PromptVideo& video, int runs) {
  const int budget = PromptVideo::kDefaultMaxSoftTokens;
  const Gemma4ImageProcessorOptions options = engine.image_processor_options(budget);
  const image::RgbImage& first = video.frames.front();
  const Gemma4ImagePatches sample =
      gemma4_preprocess_image(first.pixels, first.width, first.height, options);
  print_line("FRAMES %zu of %dx%d, each resized to %dx%d: %d patches, %d soft tokens\n",
             video.frames.size(), first.width, first.height, sample.resized_width,
             sample.resized_height, sample.num_patches, sample.num_soft_tokens);
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const BenchClock::time_point t0 = BenchClock::now();
    int patches = 0;  // used, so the work cannot be optimised away
    for (const image::RgbImage& frame : video.frames) {
      patches +=
          gemma4_preprocess_image(frame.pixels, frame.width, frame.height, options).num_patches;
    }
    seconds.push_back(seconds_of(BenchClock::now() - t0));
    print_line("PREPROCESS run %d/%d: %.3f s (%.2f ms per frame), %d patches\n", i + 1, runs,
               seconds.back(), 1000 * seconds.back() / static_cast<double>(video.frames.size()),
               patches);
  }
  print_line("PREPROCESS median of %d runs: %.3f s\n", runs, median(seconds));
}

// One frame as an image request alone, `runs` times; the median encoder seconds.
double bench_image(Engine& engine, const image::RgbImage& frame, int runs) {
  std::vector<double> encode, ttft;
  for (int i = 0; i < runs; ++i) {
    EngineRequest r = greedy_request("image-" + std::to_string(i),
                                     {2, engine.model_config().image_token_id.value()}, 1);
    r.images.push_back(PromptImage{frame, PromptVideo::kDefaultMaxSoftTokens});
    const AloneRun run = run_alone(engine, std::move(r), 1, "bench video");
    encode.push_back(run.encoder_seconds);
    ttft.push_back(run.ttft);
    print_line("IMAGE run %d/%d: one frame at %d soft tokens: encoder %.3f s, TTFT %.3f s\n", i + 1,
               runs, PromptVideo::kDefaultMaxSoftTokens, encode.back(), ttft.back());
  }
  print_line("IMAGE median of %d runs: encoder %.3f s, TTFT %.3f s\n", runs, median(encode),
             median(ttft));
  return median(encode);
}

EngineRequest video_request(const Engine& engine, const std::string& id, PromptVideo video) {
  EngineRequest r = greedy_request(id, {2, engine.model_config().video_token_id.value()}, 1);
  r.videos.push_back(std::move(video));
  return r;
}

// The video request alone, `runs` times, against `image_encode` (one frame's encode).
void bench_video_alone(Engine& engine, const PromptVideo& video, int runs, double image_encode) {
  const size_t frames = video.frames.size();
  print_line("VIDEO prompt: %zu tokens (%zu frames with their timestamps)\n",
             engine.video_frame_ids(video).size() + 1, frames);
  std::vector<double> encode, ttft;
  for (int i = 0; i < runs; ++i) {
    const AloneRun run = run_alone(
        engine, video_request(engine, "video-" + std::to_string(i), video), frames, "bench video");
    encode.push_back(run.encoder_seconds);
    ttft.push_back(run.ttft);
    print_line("VIDEO run %d/%d: encoder %.3f s (%.3f s per frame) in %llu step(s), TTFT %.3f s\n",
               i + 1, runs, run.encoder_seconds, run.encoder_seconds / static_cast<double>(frames),
               static_cast<unsigned long long>(run.encoder_steps), run.ttft);
  }
  const double per_frame = median(encode) / static_cast<double>(frames);
  print_line(
      "VIDEO median of %d runs: encoder %.3f s, %.3f s per frame = %.2fx one image's encode; "
      "TTFT %.3f s\n",
      runs, median(encode), per_frame, per_frame / image_encode, median(ttft));
}

// Decode streams with the clip arriving beside them, `runs` times.
void bench_gaps(Engine& engine, const std::vector<std::uint8_t>& clip, const VideoLoadOptions& load,
                const Options& o) {
  const MediaBenchOptions& c = o.common;
  print_line("GAPS %d decode stream(s), %d tokens each before the video request, %d run(s)\n",
             c.streams, c.tokens_before, c.runs);
  std::vector<double> longest, ttft, decode_seconds;
  for (int i = 0; i < c.runs; ++i) {
    double decoded_in = 0;
    const ArrivalGaps g =
        measure_arrival_gaps(engine, c.streams, c.tokens_before, [&](OutputCallback callback) {
          const BenchClock::time_point t0 = BenchClock::now();
          PromptVideo video = prompt_video_of(decode(clip, load));
          decoded_in = seconds_of(BenchClock::now() - t0);
          engine.add_request(video_request(engine, "gaps-" + std::to_string(i), std::move(video)),
                             std::move(callback));
        });
    const std::string run = "run " + std::to_string(i + 1) + "/" + std::to_string(c.runs);
    print_gaps(run + " before the video request", g.before);
    print_gaps(run + " during the video request", g.during);
    print_line("GAPS %s during, stream 0 in order (s):%s\n", run.c_str(),
               seconds_list(g.stream0_during).c_str());
    print_line(
        "GAPS %s video request: decode %.3f s, TTFT %.3f s; encoder %.3f s in %llu step(s); %d "
        "stream token(s) meanwhile\n",
        run.c_str(), decoded_in, g.ttft,
        g.stats_after.encoder_seconds - g.stats_before.encoder_seconds,
        static_cast<unsigned long long>(g.stats_after.encoder_steps - g.stats_before.encoder_steps),
        g.stream_tokens_during);
    longest.push_back(g.during.empty() ? 0 : *std::max_element(g.during.begin(), g.during.end()));
    ttft.push_back(g.ttft);
    decode_seconds.push_back(decoded_in);
  }
  print_line("GAPS median of %d runs: longest gap during %.3f s; TTFT %.3f s; decode %.3f s\n",
             c.runs, median(longest), median(ttft), median(decode_seconds));
}

}  // namespace

int run_bench_video(const std::vector<std::string>& args) {
  bool help = false;
  Options o = parse_options(args, &help);
  if (help) {
    std::cout << kVideoUsage << engine_flags_usage();
    return 0;
  }
  MediaBenchOptions& c = o.common;
  print_cpu_line(c.engine);
  log::set_level(log::Level::kWarning);
  const video::ClipSpec spec = clip_spec(o);
  const BenchClock::time_point t0 = BenchClock::now();
  const std::vector<std::uint8_t> clip = video::make_synthetic_clip(spec);
  print_line(
      "CLIP %.2f s of %dx%d at %d fps, H.264 (libx264 veryfast, a keyframe every %d frames) in "
      "MP4: %zu bytes (%.2f Mbit/s), made in %.1f s\n",
      spec.frames / static_cast<double>(o.fps), o.width, o.height, o.fps, spec.keyframe_interval,
      clip.size(), static_cast<double>(clip.size()) * 8e-6 * o.fps / spec.frames,
      seconds_of(BenchClock::now() - t0));
  const VideoLoadOptions load = engine_video_load_options(c.engine, media::MediaConnectorOptions{});
  video::DecodedVideo decoded = bench_decode(clip, load, c.runs);

  std::optional<TempModelDir> temp;
  const std::unique_ptr<Engine> loaded = load_bench_engine(c, &temp, "bench video");
  Engine& engine = *loaded;
  if (!engine.has_vision()) throw InputError(c.model + " has no vision tower (vision_config)");
  const PromptVideo video = prompt_video_of(std::move(decoded));
  bench_preprocess(engine, video, c.runs);
  const double image_encode = bench_image(engine, video.frames.front(), c.runs);
  bench_video_alone(engine, video, c.runs, image_encode);
  bench_gaps(engine, clip, load, o);
  return 0;
}

}  // namespace gemmaserve
