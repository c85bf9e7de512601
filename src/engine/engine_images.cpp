// The engine's image work: which images a step may compute, slices of their encodes within
// the step's budget, and the rows handed to forward.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "engine/engine.h"
#include "engine/engine_state.h"
#include "engine/image_placeholders.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_model.h"

namespace gemmaserve {

bool Engine::image_ready(const std::string& scheduler_id, size_t image) {
  RequestMedia& img = sequences_.at(scheduler_id)->owner->images.at(image);
  if (img.rows) return true;
  if (img.job || img.audio_job || img.looked_up || !encoder_cache_.enabled()) return false;
  img.looked_up = true;
  ++counters_.mm_cache_queries;
  img.rows = encoder_cache_.find(img.hash);
  if (img.rows) ++counters_.mm_cache_hits;
  return img.rows != nullptr;
}

// Encoder budget rule: a step may spend max_num_batched_tokens minus the tokens it schedules,
// one token per patch-stage (one patch through one of an encoder layer's three stages; an audio
// time step through a conformer layer is three), on the media that stopped its chunks, in
// scheduling order; the first always advances by one unit (a block of kVisionRowBlock patches
// through one stage, or one audio stage) so encoding never stalls.
void Engine::run_encoder(StepPlan* plan) {
  if (plan->encodes.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  int64_t left = plan->encoder_budget;
  bool advanced = false;
  for (const StepPlan::Encode& e : plan->encodes) {
    if (advanced && left <= 0) break;
    RequestMedia& image = e.request->images[e.image];
    if (image.rows) continue;
    if (!image.job && !image.audio_job && encoder_cache_.enabled()) {
      image.rows = encoder_cache_.find(image.hash);  // another request's encode just ended
      if (image.rows) continue;
    }
    if (image.audio) {
      if (!image.audio_job) {
        std::unique_ptr<AudioEncodeJob> job = model_->begin_audio_encode(image.audio->samples);
        image.audio_job = std::unique_ptr<AudioEncodeJob, RequestMedia::JobRelease>(
            job.release(), RequestMedia::JobRelease{encodes_alive_});
        ++*encodes_alive_;
      }
      left -= model_->advance_audio_encode(*image.audio_job, std::max<int64_t>(left, 1));
      advanced = true;
      if (!image.audio_job->done()) continue;
      auto rows = std::make_shared<std::vector<float>>();
      model_->finish_audio_encode(*image.audio_job, rows.get());
      image.audio_job.reset();
      finish_encode(image, std::move(rows), plan);
      continue;
    }
    if (!image.job) {
      const image::RgbImage& rgb = image.image.rgb;
      const Gemma4ImagePatches patches = gemma4_preprocess_image(
          rgb.pixels, rgb.width, rgb.height, image_processor_options(image.max_soft_tokens));
      std::unique_ptr<VisionEncodeJob> job =
          model_->begin_image_encode({patches.pixel_values, patches.position_ids});
      image.job = std::unique_ptr<VisionEncodeJob, RequestMedia::JobRelease>(
          job.release(), RequestMedia::JobRelease{encodes_alive_});
      ++*encodes_alive_;
    }
    left -= model_->advance_image_encode(*image.job, std::max<int64_t>(left, 1));
    advanced = true;
    if (!image.job->done()) continue;
    auto rows = std::make_shared<std::vector<float>>();
    model_->finish_image_encode(*image.job, rows.get());
    image.job.reset();
    finish_encode(image, std::move(rows), plan);
  }
  plan->encoder_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Engine::finish_encode(RequestMedia& media, std::shared_ptr<std::vector<float>> rows,
                           StepPlan* plan) {
  const size_t want = static_cast<size_t>(media.where.length) *
                      static_cast<size_t>(model_->text_config().hidden_size);
  if (rows->size() != want) {
    throw std::logic_error(std::string(media.audio ? "audio" : "image") + " encoded to " +
                           std::to_string(rows->size()) + " floats, its placeholder holds " +
                           std::to_string(want));
  }
  ++plan->images_encoded;
  media.rows = std::move(rows);
  encoder_cache_.insert(media.hash, media.rows);
}

void Engine::attach_images(StepPlan* plan) {
  for (size_t i = 0; i < plan->items.size(); ++i) {
    StepPlan::Item& item = plan->items[i];
    if (item.images.empty()) continue;
    for (size_t k : item.images) {
      RequestMedia& image = item.request->images[k];
      // The scheduler let the chunk reach the image only once image_ready() held.
      if (!image.rows) throw std::logic_error("a chunk reached an image with no rows");
      item.rows.push_back(image.rows);
      item.embeddings.push_back({image.where.offset, image.where.length, image.rows->data()});
      if (image.audio) continue;  // audio tokens attend causally
      item.vision_blocks.push_back({image.where.offset, image.where.offset + image.where.length});
    }
    plan->inputs[i].embeddings = item.embeddings;
    plan->inputs[i].vision_blocks = item.vision_blocks;
  }
}

}  // namespace gemmaserve
