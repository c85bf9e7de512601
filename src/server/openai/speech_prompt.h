// What Gemma 4 is asked for speech-to-text: the languages the endpoints name (OpenAI's ISO 639-1
// list, as vLLM's speech models check it) and the instructions of Google's model card for
// speech recognition (transcribe) and speech translation (transcribe, then translate). vLLM
// serves no transcription for Gemma 4; these are the card's own prompts.
#pragma once

#include <optional>
#include <string>

namespace gemmaserve {

enum class SpeechTask { kTranscribe, kTranslate };

// "transcribe" / "translate": the id prefix of a response and the task's name.
const char* speech_task_name(SpeechTask task);

// The English name of an ISO 639-1 code OpenAI's speech endpoints take ("fr" -> "French"), or
// nullopt for any other code.
std::optional<std::string> speech_language_name(const std::string& code);

// vLLM's 400 for a code outside the list: "Unsupported language: 'xx'.  Must be one of ['af',
// ...]." (its wording, two spaces included).
std::string unsupported_language_message(const std::string& code);

// The user turn's text after the audio. Transcribe: "Transcribe the following speech segment in
// French into French text." and the card's formatting rules (a clip of unknown language: "in its
// language"). Translate: transcribe in the source, then translate into the target, answering
// "<transcription>\n<Target>: <translation>". A non-empty `context` (the request's prompt:
// names, spellings, the text before) is added as context the speech may continue.
std::string speech_instruction(SpeechTask task, const std::optional<std::string>& language,
                               const std::string& target_language, const std::string& context);

// The line a translation's answer begins its translation with ("English: ").
std::string translation_marker(const std::string& target_language);

}  // namespace gemmaserve
