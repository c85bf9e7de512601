// `--config FILE.yaml` (src/cli/config_file.cpp): every shape of value vLLM's
// FlexibleArgumentParser takes from a config file, the command line overriding it flag by flag,
// and the exact error of every bad file; then through `serve`'s own flag parsing, and wired into
// generate and bench.
#include "cli/config_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/serve_command.h"
#include "core/logging.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using testing::input_error_of;

// A command's flags of every kind, as the commands declare theirs.
ArgParser command_parser() {
  ArgParser p;
  p.value("--config").value("--model").value("--max-model-len").value("--port");
  p.value("--kv-cache-memory-bytes", {"--kv-cache-memory"})
      .value("--tensor-parallel-size", {"-tp"});
  p.list("--served-model-name").json("--speculative-config");
  p.flag("--enable-prefix-caching").flag("--enforce-eager");
  return p;
}

class ConfigFileTest : public ::testing::Test {
 protected:
  // Writes `text` to NAME in the test's folder and returns its path.
  std::string file(const std::string& text, const std::string& name = "c.yaml") {
    const std::string path = (tmp_.path() / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Parses `args` (with --config PATH appended when `text` is given) into parser_.
  void parse(std::vector<std::string> args, const std::string& text, size_t max_positionals = 1) {
    args.push_back("--config");
    args.push_back(file(text));
    flags_ = parse_with_config_file(parser_, args, max_positionals);
  }

  // The error of parsing `text` as the config file of a bare command line.
  std::string error_of(const std::string& text) {
    ArgParser fresh = command_parser();
    const std::string path = file(text);
    return input_error_of([&] { parse_with_config_file(fresh, {"--config", path}, 1); });
  }

  // "--config PATH: line N: what" for the file error_of writes.
  std::string at_line(int line, const std::string& what) {
    return "--config " + (tmp_.path() / "c.yaml").string() + ": line " + std::to_string(line) +
           ": " + what;
  }

  testing::TempDir tmp_;
  ArgParser parser_ = command_parser();
  ConfigFileFlags flags_;
};

TEST_F(ConfigFileTest, KeysAreFlagNamesWithDashesUnderscoresOrAnAlias) {
  parse({}, "max-model-len: 4k\ntensor_parallel_size: 2\nkv-cache-memory: 2G\n");
  EXPECT_EQ(parser_.get("--max-model-len"), "4k");
  EXPECT_EQ(parser_.get("--tensor-parallel-size"), "2");
  EXPECT_EQ(parser_.get("--kv-cache-memory-bytes"), "2G");
  EXPECT_FALSE(parser_.has("--port"));
}

TEST_F(ConfigFileTest, ValuesAreTheirTextAsWritten) {
  parse({}, "max-model-len: '0x10'\nport: 8001\nkv-cache-memory: \"1.5g\"\n");
  EXPECT_EQ(parser_.get("--max-model-len"), "0x10");
  EXPECT_EQ(parser_.get("--port"), "8001");
  EXPECT_EQ(parser_.get("--kv-cache-memory-bytes"), "1.5g");
}

TEST_F(ConfigFileTest, ABooleanSetsASwitchAndFalseIsItsNoForm) {
  parse({}, "enforce-eager: true\nenable-prefix-caching: false\n");
  EXPECT_TRUE(parser_.get_flag("--enforce-eager"));
  EXPECT_TRUE(parser_.has("--enable-prefix-caching"));
  EXPECT_FALSE(parser_.get_flag("--enable-prefix-caching", true));
}

TEST_F(ConfigFileTest, PyYamlBooleansYesNoOnOff) {
  parse({}, "enforce-eager: yes\nenable_prefix_caching: Off\n");
  EXPECT_TRUE(parser_.get_flag("--enforce-eager"));
  EXPECT_FALSE(parser_.get_flag("--enable-prefix-caching", true));
}

TEST_F(ConfigFileTest, TheNoFormAsAKeyTrueSetsItFalseAddsNothing) {
  parse({}, "no-enable-prefix-caching: true\nno_enforce_eager: false\n");
  EXPECT_FALSE(parser_.get_flag("--enable-prefix-caching", true));
  EXPECT_FALSE(parser_.has("--enforce-eager"));
}

TEST_F(ConfigFileTest, AListFlagTakesAListOrOneValue) {
  parse({}, "served-model-name: [tiny, 'tiny:latest', 7]\n");
  EXPECT_EQ(parser_.all("--served-model-name"),
            (std::vector<std::string>{"tiny", "tiny:latest", "7"}));
  ArgParser one = command_parser();
  parse_with_config_file(one, {"--config", file("served_model_name: tiny\n", "one.yaml")}, 1);
  EXPECT_EQ(one.all("--served-model-name"), std::vector<std::string>{"tiny"});
}

TEST_F(ConfigFileTest, AnEmptyListAddsNothing) {
  parse({}, "served-model-name: []\n");
  EXPECT_FALSE(parser_.has("--served-model-name"));
}

TEST_F(ConfigFileTest, AJsonFlagTakesAMappingAsJsonTextTypedAsPyYamlTypesIt) {
  parse({},
        "speculative-config:\n"
        "  method: ngram\n"
        "  num_speculative_tokens: 4\n"
        "  rate: 0.5\n"
        "  big: 1_000\n"
        "  quoted: '4'\n"
        "  flag: yes\n"
        "  none: ~\n"
        "  version: 1.10\n"
        "  sizes: [1, -2, +3., .5e+3]\n"
        "  nested: {a: {b: false}}\n");
  EXPECT_EQ(parser_.get("--speculative-config"),
            R"({"method":"ngram","num_speculative_tokens":4,"rate":0.5,"big":1000,"quoted":"4",)"
            R"("flag":true,"none":null,"version":1.1,"sizes":[1,-2,3.0,500.0],)"
            R"("nested":{"a":{"b":false}}})");
}

TEST_F(ConfigFileTest, AJsonFlagTakesAListOrJsonTextToo) {
  parse({}, "speculative-config: [1, x]\n");
  EXPECT_EQ(parser_.get("--speculative-config"), R"([1,"x"])");
  ArgParser text = command_parser();
  parse_with_config_file(
      text, {"--config", file("speculative-config: '{\"method\": \"ngram\"}'\n", "t.yaml")}, 1);
  EXPECT_EQ(text.get("--speculative-config"), R"({"method": "ngram"})");
}

TEST_F(ConfigFileTest, ModelIsThePositionalUnlessTheCommandLineGivesOne) {
  parse({}, "model: /models/gemma\nmax-model-len: 64\n");
  EXPECT_EQ(parser_.positionals(), std::vector<std::string>{"/models/gemma"});
  EXPECT_FALSE(parser_.has("--model"));

  ArgParser positional = command_parser();
  parse_with_config_file(positional, {"/cli", "--config", file("model: /file\n", "m.yaml")}, 1);
  EXPECT_EQ(positional.positionals(), std::vector<std::string>{"/cli"});

  ArgParser flag = command_parser();
  parse_with_config_file(flag, {"--model", "/cli", "--config", file("model: /file\n", "m.yaml")},
                         1);
  EXPECT_TRUE(flag.positionals().empty());
  EXPECT_EQ(flag.get("--model"), "/cli");
}

TEST_F(ConfigFileTest, ModelIsTheModelFlagOfACommandWithoutPositionals) {
  parse({}, "model: tiny\n", 0);
  EXPECT_EQ(parser_.get("--model"), "tiny");
  EXPECT_TRUE(parser_.positionals().empty());
}

TEST_F(ConfigFileTest, TheCommandLineOverridesTheFileWhateverTheOrder) {
  const std::string path =
      file("max-model-len: 4096\nserved-model-name: [a, b]\nenable-prefix-caching: true\n");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--max-model-len", "64", "--served-model-name", "c", "--no-enable-prefix-caching",
            "--config", path},
           {"--config=" + path, "--max_model_len=64", "--served-model-name", "c",
            "--no-enable-prefix-caching"}}) {
    ArgParser p = command_parser();
    parse_with_config_file(p, args, 1);
    EXPECT_EQ(p.all("--max-model-len"), std::vector<std::string>{"64"});
    EXPECT_EQ(p.all("--served-model-name"), std::vector<std::string>{"c"});
    EXPECT_FALSE(p.get_flag("--enable-prefix-caching", true));
  }
}

TEST_F(ConfigFileTest, AnAliasOnTheCommandLineOverridesTheFile) {
  parse({"-tp", "1"}, "tensor-parallel-size: 4\n");
  EXPECT_EQ(parser_.all("--tensor-parallel-size"), std::vector<std::string>{"1"});
}

TEST_F(ConfigFileTest, AnEmptyFileOrCommentsOnlySetNothing) {
  parse({"--port", "1"}, "");
  EXPECT_EQ(parser_.get("--port"), "1");
  ArgParser comments = command_parser();
  parse_with_config_file(comments, {"--config", file("# nothing yet\n", "n.yaml")}, 1);
  EXPECT_FALSE(comments.has("--max-model-len"));
}

TEST_F(ConfigFileTest, WithoutConfigTheCommandLineAlone) {
  ArgParser p = command_parser();
  const ConfigFileFlags flags = parse_with_config_file(p, {"m", "--port", "1"}, 1);
  EXPECT_EQ(p.get("--port"), "1");
  EXPECT_EQ(flags.explain(InputError("flag --port expects an integer")).what(),
            std::string("flag --port expects an integer"));
}

// A bad file: what is wrong, its text, the line its error names, the error after "line N: ".
struct BadFile {
  const char* what;
  const char* yaml;
  int line;
  const char* error;
};

const BadFile kBadFiles[] = {
    {"unknown key", "port: 1\nmax-modle-len: 3\n", 2,
     "unknown key 'max-modle-len' (no flag --max-modle-len)"},
    {"key spelled with dashes", "--port: 1\n", 1,
     "unknown key '--port' (keys are flag names without the dashes)"},
    {"no form of a value flag is unknown", "no-port: true\n", 1,
     "unknown key 'no-port' (no flag --no-port)"},
    {"key that is not text", "[a, b]: 1\n", 1, "a key must be a flag name, got a list"},
    {"duplicate key", "port: 1\n\nport: 2\n", 3, "duplicate key 'port' (first set on line 1)"},
    {"duplicate key in the other spelling", "max-model-len: 1\nmax_model_len: 2\n", 2,
     "duplicate key 'max_model_len' (first set on line 1)"},
    {"duplicate key as an alias", "kv-cache-memory-bytes: 1G\nkv-cache-memory: 2G\n", 2,
     "duplicate key 'kv-cache-memory' (first set on line 1)"},
    {"duplicate key as the no form", "enforce-eager: true\nno-enforce-eager: true\n", 2,
     "duplicate key 'no-enforce-eager' (first set on line 1)"},
    {"duplicate model", "model: a\nmodel: b\n", 2, "duplicate key 'model' (first set on line 1)"},
    {"duplicate key inside a json mapping",
     "speculative-config:\n  method: ngram\n  method: draft\n", 3,
     "duplicate key 'speculative-config.method' (first set on line 2)"},
    {"mapping where a number goes", "max-model-len:\n  tokens: 4096\n", 1,
     "'max-model-len' takes one value, got a mapping"},
    {"list where one value goes", "port: [1, 2]\n", 1, "'port' takes one value, got a list"},
    {"no value", "port:\nmax-model-len: 1\n", 1, "'port' has no value"},
    {"null for a json flag", "speculative-config: null\n", 1, "'speculative-config' has no value"},
    {"model that is not one value", "model: [a, b]\n", 1, "'model' takes one value, got a list"},
    {"switch given a number", "enforce-eager: 1\n", 1,
     "'enforce-eager' is a switch: expected true or false, got '1'"},
    {"switch given quoted text", "enforce-eager: 'true'\n", 1,
     "'enforce-eager' is a switch: expected true or false, got 'true'"},
    {"switch given a mapping", "enforce-eager: {a: 1}\n", 1,
     "'enforce-eager' is a switch: expected true or false, got a mapping"},
    {"switch given no value", "enforce-eager:\n", 1,
     "'enforce-eager' is a switch: expected true or false, got no value"},
    {"mapping in a list", "served-model-name:\n  - a\n  - {b: 1}\n", 3,
     "'served-model-name' takes a list of values, got a mapping in it"},
    {"a json mapping's key that is not text", "speculative-config: {[a]: 1}\n", 1,
     "a key of 'speculative-config' must be text, got a list"},
    {"infinity in a json flag", "speculative-config:\n  x: [1, .inf]\n", 2,
     "'speculative-config.x[1]' is .inf, which JSON cannot hold"},
    {"a config file naming another", "config: other.yaml\n", 1,
     "a config file cannot name another (config)"},
    {"invalid yaml", "port: 1\nserved-model-name: [a, b\n", 3,
     "invalid YAML: end of sequence flow not found"},
    {"invalid yaml mapping", "port: 1\nmax-model-len: 2: 3\n", 2,
     "invalid YAML: illegal map value"},
    {"not a mapping", "- port\n- 1\n", 1, "must be a mapping of flag names to values, got a list"},
    {"just a value", "port\n", 1, "must be a mapping of flag names to values, got 'port'"},
    {"two documents", "port: 1\n---\nport: 2\n", 3,
     "a second YAML document; the file must be one mapping"},
};

TEST_F(ConfigFileTest, EveryBadFileGetsItsExactErrorAndLine) {
  for (const BadFile& bad : kBadFiles) {
    SCOPED_TRACE(bad.what);
    EXPECT_EQ(error_of(bad.yaml), at_line(bad.line, bad.error));
  }
}

TEST_F(ConfigFileTest, MissingFile) {
  const std::string path = (tmp_.path() / "absent.yaml").string();
  ArgParser p = command_parser();
  EXPECT_EQ(input_error_of([&] {
              parse_with_config_file(p, {"--config", path}, 1);
            }),
            "--config " + path + ": cannot be read (No such file or directory)");
}

TEST_F(ConfigFileTest, ADirectory) {
  const std::string path = (tmp_.path() / "dir.yaml").string();
  std::filesystem::create_directory(path);
  ArgParser p = command_parser();
  EXPECT_EQ(input_error_of([&] {
              parse_with_config_file(p, {"--config", path}, 1);
            }),
            "--config " + path + ": cannot be read (it is a directory)");
}

TEST_F(ConfigFileTest, NotYamlByItsName) {
  const std::string path = file("{}", "c.json");
  ArgParser p = command_parser();
  EXPECT_EQ(input_error_of([&] {
              parse_with_config_file(p, {"--config", path}, 1);
            }),
            "--config " + path + ": must be a .yaml or .yml file");
}

TEST_F(ConfigFileTest, YmlIsYamlToo) {
  ArgParser p = command_parser();
  parse_with_config_file(p, {"--config", file("port: 2\n", "c.yml")}, 1);
  EXPECT_EQ(p.get("--port"), "2");
}

TEST_F(ConfigFileTest, TwoConfigFiles) {
  const std::string path = file("port: 1\n");
  ArgParser p = command_parser();
  EXPECT_EQ(input_error_of([&] {
              parse_with_config_file(p, {"--config", path, "--config", path}, 1);
            }),
            "--config given more than once (one file only)");
}

TEST_F(ConfigFileTest, ConfigWithoutAFile) {
  ArgParser p = command_parser();
  EXPECT_EQ(input_error_of([&] { parse_with_config_file(p, {"--config"}, 1); }),
            "flag --config needs a value");
}

TEST_F(ConfigFileTest, ALaterErrorNamingAFlagTheFileSetGetsItsLine) {
  parse({"--max-model-len", "9"}, "port: x\n\nenforce-eager: true\n");
  const std::string where = " (line 1 of --config " + (tmp_.path() / "c.yaml").string() + ")";
  EXPECT_EQ(
      std::string(flags_.explain(InputError("flag --port expects an integer, got 'x'")).what()),
      "flag --port expects an integer, got 'x'" + where);
  // The first flag named decides; a command-line flag or a longer name is not the file's.
  EXPECT_EQ(std::string(flags_.explain(InputError("--port and --enforce-eager clash")).what()),
            "--port and --enforce-eager clash" + where);
  EXPECT_EQ(std::string(flags_.explain(InputError("--max-model-len: too large")).what()),
            "--max-model-len: too large");
  EXPECT_EQ(std::string(flags_.explain(InputError("--port-range: bad")).what()),
            "--port-range: bad");
  EXPECT_EQ(flags_.explaining([] { return 7; }), 7);
  EXPECT_EQ(input_error_of([&] {
              flags_.explaining([]() -> int { throw InputError("--enforce-eager: no"); });
            }),
            "--enforce-eager: no (line 3 of --config " + (tmp_.path() / "c.yaml").string() + ")");
}

// Through serve's flag parsing: the file's settings land where the flags' do.
class ServeConfigFileTest : public ConfigFileTest {
 protected:
  ServeSetup serve(std::vector<std::string> args, const std::string& text) {
    args.push_back("--config");
    args.push_back(file(text, "serve.yaml"));
    std::optional<ServeSetup> setup = parse_serve_args(args);
    EXPECT_TRUE(setup.has_value());
    return setup.value_or(ServeSetup{});
  }

  std::string serve_error(const std::string& text) {
    return input_error_of([&] { serve({}, text); });
  }

  std::string from_line(int line) {
    return " (line " + std::to_string(line) + " of --config " +
           (tmp_.path() / "serve.yaml").string() + ")";
  }
};

TEST_F(ServeConfigFileTest, EveryKindOfSettingReachesServe) {
  const ServeSetup s = serve({},
                             "model: /models/gemma\n"
                             "served_model_name: [tiny, tiny-alias]\n"
                             "max-model-len: 2k\n"
                             "port: 8123\n"
                             "enable-prefix-caching: false\n"
                             "enable-auto-tool-choice: true\n"
                             "allowed-media-domains: [example.com, cdn.example.com]\n"
                             "allowed-origins: ['https://app.example']\n"
                             "limit-mm-per-prompt: {image: 2, video: 1}\n"
                             "default-chat-template-kwargs:\n"
                             "  enable_thinking: true\n"
                             "speculative-config:\n"
                             "  method: ngram\n"
                             "  num_speculative_tokens: 2\n"
                             "override-generation-config: {temperature: 0.5}\n");
  EXPECT_EQ(s.model, "/models/gemma");
  EXPECT_EQ(s.engine_args.model, "/models/gemma");
  EXPECT_EQ(s.options.served_model_names, (std::vector<std::string>{"tiny", "tiny-alias"}));
  EXPECT_EQ(s.engine_args.max_model_len, 2000);
  EXPECT_EQ(s.options.port, 8123);
  EXPECT_FALSE(s.engine_args.enable_prefix_caching);
  EXPECT_TRUE(s.options.enable_auto_tool_choice);
  EXPECT_EQ(s.options.media.allowed_media_domains,
            (std::vector<std::string>{"example.com", "cdn.example.com"}));
  EXPECT_EQ(s.options.cors.allowed_origins, std::vector<std::string>{"https://app.example"});
  EXPECT_EQ(s.engine_args.limit_mm_per_prompt,
            (std::map<std::string, int>{{"image", 2}, {"video", 1}}));
  EXPECT_EQ(s.options.default_chat_template_kwargs.dump(), R"({"enable_thinking":true})");
  EXPECT_EQ(s.engine_args.speculative_config, R"({"method":"ngram","num_speculative_tokens":2})");
  EXPECT_EQ(s.engine_args.override_generation_config, R"({"temperature":0.5})");
}

TEST_F(ServeConfigFileTest, TheCommandLineWinsOverTheFile) {
  const ServeSetup s = serve({"/cli/model", "--port", "9000", "--served-model-name", "cli"},
                             "model: /file/model\nport: 8123\nserved-model-name: [a, b]\n"
                             "max-model-len: 512\n");
  EXPECT_EQ(s.model, "/cli/model");
  EXPECT_EQ(s.options.port, 9000);
  EXPECT_EQ(s.options.served_model_names, std::vector<std::string>{"cli"});
  EXPECT_EQ(s.engine_args.max_model_len, 512);
}

TEST_F(ServeConfigFileTest, AFileWithoutAModelNeedsOneOnTheCommandLine) {
  EXPECT_EQ(serve_error("port: 8123\n")
                .rfind("serve needs MODEL_DIR (or --model, or model: in the --config file)\n", 0),
            0u);
}

TEST_F(ServeConfigFileTest, ARefusedFlagStaysRefusedWithItsReasonAndLine) {
  EXPECT_EQ(serve_error("model: /m\nssl-keyfile: key.pem\n"),
            "--ssl-keyfile: serves HTTPS; gemmaserve speaks plain HTTP only: put a "
            "TLS-terminating proxy in front" +
                from_line(2));
}

TEST_F(ServeConfigFileTest, ARefusedJsonFlagGivenAMappingIsRefusedForItsReason) {
  EXPECT_EQ(serve_error("model: /m\nkv-transfer-config:\n  kv_connector: X\n"),
            "--kv-transfer-config: moves KV caches between instances (disaggregated prefill); "
            "gemmaserve has no KV transfer" +
                from_line(2));
}

TEST_F(ServeConfigFileTest, AnAcceptedValueOfARefusedFlagIsAccepted) {
  const ServeSetup s = serve({"/m"}, "pipeline-parallel-size: 1\napi-server-count: 1\n");
  EXPECT_EQ(s.model, "/m");
}

TEST_F(ServeConfigFileTest, HintFlagsWarnAsOnTheCommandLine) {
  ::testing::internal::CaptureStderr();
  serve({"/m"}, "enforce-eager: true\ncompilation-config: {level: 3}\n");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("--enforce-eager: turns off CUDA graphs and torch.compile"), std::string::npos)
      << log;
  EXPECT_NE(log.find("--compilation-config: torch.compile and CUDA graph settings"),
            std::string::npos)
      << log;
}

TEST_F(ServeConfigFileTest, ABadValueNamesItsFlagAndLine) {
  EXPECT_EQ(serve_error("model: /m\n\nmax-model-len: lots\n"),
            "--max-model-len: 'lots' is not an integer (suffixes k/m/g/t multiply by powers of "
            "1000, K/M/G/T by 1024)" +
                from_line(3));
}

TEST_F(ServeConfigFileTest, ABadJsonMappingNamesItsFlagAndLine) {
  EXPECT_EQ(serve_error("model: /m\nstructured-outputs-config: {backend: xgrammar}\n"),
            "--structured-outputs-config: 'backend' is not supported: gemmaserve has one "
            "structured-output backend (keys: disable_any_whitespace, backend auto)" +
                from_line(2));
}

TEST_F(ServeConfigFileTest, TwoApiKeysAreRefusedAsOnTheCommandLine) {
  EXPECT_EQ(serve_error("model: /m\napi-key: [a, b]\n"),
            "--api-key: takes several keys; gemmaserve checks one key" + from_line(2));
  EXPECT_EQ(input_error_of([] {
              parse_serve_args({"/m", "--api-key", "a", "b"});
            }),
            "--api-key: takes several keys; gemmaserve checks one key");
}

TEST_F(ServeConfigFileTest, AnUnknownKeyIsUnknownToServe) {
  EXPECT_EQ(serve_error("model: /m\nprompt: hi\n"),
            "--config " + (tmp_.path() / "serve.yaml").string() +
                ": line 2: unknown key 'prompt' (no flag --prompt)");
}

// generate and bench read --config too: a file error before anything loads.
TEST_F(ConfigFileTest, GenerateAndBenchReadTheFile) {
  const std::string path = file("model: /m\nmax-modle-len: 1\n");
  const std::string expected = "error: --config " + path +
                               ": line 2: unknown key 'max-modle-len' (no flag --max-modle-len)\n";
  for (const std::string command :
       {"generate", "bench latency", "bench throughput", "bench serve", "bench audio"}) {
    SCOPED_TRACE(command);
    const testing::CommandResult r = testing::run_command(testing::cli_binary().string() + " " +
                                                          command + " --config " + path + " 2>&1");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, expected);
  }
}

TEST_F(ConfigFileTest, GenerateTakesItsPromptsFromTheFile) {
  const std::string path = file("model: /absent\nmax-tokens: 4\n\nprompt-ids: ['2,x']\n");
  const testing::CommandResult r =
      testing::run_command(testing::cli_binary().string() + " generate --config " + path + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out,
            "error: --prompt-ids: 'x' is not an integer (expected a list like 2,45,67) "
            "(line 4 of --config " +
                path + ")\n");
}

}  // namespace
}  // namespace gemmaserve
