// POST /v1/audio/transcriptions and /v1/audio/translations: speech-to-text with Gemma 4's audio
// input, in vLLM's wire format (its speech-to-text serving; vLLM has no Gemma 4 transcription
// itself). The clip is cut into pieces of at most 30 s (vLLM's quietest-window rule), each piece
// one engine request with the model card's instruction, all in flight together; their texts are
// joined in order (a space between, none for Japanese and Chinese). Formats: json, text,
// verbose_json with one segment per piece, srt and vtt from those segments; streaming in vLLM's
// transcription.chunk / translation.chunk events, piece after piece.
#pragma once

#include "server/openai/transcription_protocol.h"
#include "server/shared/serving_common.h"

namespace gemmaserve {

// A plain-text answer (response_format text, srt, vtt) is in `text`/`content_type` of the
// returned response; ApiError / InputError for a bad request, before any streaming starts.
ServingResponse serve_speech_to_text(ServingContext& ctx, const SpeechForm& form, SpeechTask task);

}  // namespace gemmaserve
