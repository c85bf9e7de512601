#include "server/openai/speech_prompt.h"

#include <array>
#include <string_view>
#include <utility>

namespace gemmaserve {
namespace {

// OpenAI's speech-to-text languages (vLLM's ISO639_1_SUPPORTED_LANGS), in its order.
constexpr std::array<std::pair<std::string_view, std::string_view>, 57> kLanguages{{
    {"af", "Afrikaans"},  {"ar", "Arabic"},    {"hy", "Armenian"},  {"az", "Azerbaijani"},
    {"be", "Belarusian"}, {"bs", "Bosnian"},   {"bg", "Bulgarian"}, {"ca", "Catalan"},
    {"zh", "Chinese"},    {"hr", "Croatian"},  {"cs", "Czech"},     {"da", "Danish"},
    {"nl", "Dutch"},      {"en", "English"},   {"et", "Estonian"},  {"fi", "Finnish"},
    {"fr", "French"},     {"gl", "Galician"},  {"de", "German"},    {"el", "Greek"},
    {"he", "Hebrew"},     {"hi", "Hindi"},     {"hu", "Hungarian"}, {"is", "Icelandic"},
    {"id", "Indonesian"}, {"it", "Italian"},   {"ja", "Japanese"},  {"kn", "Kannada"},
    {"kk", "Kazakh"},     {"ko", "Korean"},    {"lv", "Latvian"},   {"lt", "Lithuanian"},
    {"mk", "Macedonian"}, {"ms", "Malay"},     {"mr", "Marathi"},   {"mi", "Maori"},
    {"ne", "Nepali"},     {"no", "Norwegian"}, {"fa", "Persian"},   {"pl", "Polish"},
    {"pt", "Portuguese"}, {"ro", "Romanian"},  {"ru", "Russian"},   {"sr", "Serbian"},
    {"sk", "Slovak"},     {"sl", "Slovenian"}, {"es", "Spanish"},   {"sw", "Swahili"},
    {"sv", "Swedish"},    {"tl", "Tagalog"},   {"ta", "Tamil"},     {"th", "Thai"},
    {"tr", "Turkish"},    {"uk", "Ukrainian"}, {"ur", "Urdu"},      {"vi", "Vietnamese"},
    {"cy", "Welsh"},
}};

}  // namespace

const char* speech_task_name(SpeechTask task) {
  return task == SpeechTask::kTranscribe ? "transcribe" : "translate";
}

std::optional<std::string> speech_language_name(const std::string& code) {
  for (const auto& [c, name] : kLanguages) {
    if (c == code) return std::string(name);
  }
  return std::nullopt;
}

std::string unsupported_language_message(const std::string& code) {
  std::string list;
  for (const auto& [c, name] : kLanguages) {
    list += (list.empty() ? "'" : ", '") + std::string(c) + "'";
  }
  return "Unsupported language: '" + code + "'.  Must be one of [" + list + "].";
}

std::string translation_marker(const std::string& target_language) {
  return target_language + ": ";
}

std::string speech_instruction(SpeechTask task, const std::optional<std::string>& language,
                               const std::string& target_language, const std::string& context) {
  const std::string in = language ? "in " + *language : "in its language";
  std::string text;
  if (task == SpeechTask::kTranscribe) {
    text = "Transcribe the following speech segment " + in + " into " +
           (language ? *language + " text." : "text in that language.") +
           "\n\nFollow these specific instructions for formatting the answer:\n"
           "* Only output the transcription, with no newlines.\n"
           "* When transcribing numbers, write the digits, i.e. write 1.7 and not one point "
           "seven, and write 3 instead of three.";
  } else {
    const std::string source = language ? *language : "its language";
    text = "Transcribe the following speech segment " + in + ", then translate it into " +
           target_language + ".\nWhen formatting the answer, first output the transcription in " +
           source + ", then one newline, then output the string '" +
           translation_marker(target_language) + "', then the translation in " + target_language +
           ".";
  }
  if (!context.empty()) {
    text += "\n\nThe speech may continue this text or use its words and spellings: " + context;
  }
  return text;
}

}  // namespace gemmaserve
