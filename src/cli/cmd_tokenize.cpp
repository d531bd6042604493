// `nibble tokenize [MODEL_DIR] -p TEXT`: the token ids of a text with the
// model's tokenizer, and what each decodes to. Only the tokenizer files and
// config.json's bos_token_id are read; the weights are not loaded, so it
// answers at once even for a large model.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "cli/command.h"
#include "cli/load_flags.h"
#include "cli/text_generation.h"
#include "cli/usage_error.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {"-m,--model", "DIR", "the model folder (instead of the MODEL_DIR argument)"},
    {"-p,--prompt", "TEXT", "the text; - reads it from stdin (this or --file is required)"},
    {"-f,--file", "FILE", "read the text from FILE"},
    {"--bos", "", "start with the model's BOS token, as `nibble run` does (default: no)"},
    {"--no-special", "", "encode special-token text (e.g. <｜begin▁of▁sentence｜>) as plain text"},
    {"--ids", "", "print only the ids, comma-separated (the form `nibble logits --tokens` takes)"},
    {"--json", "", "print one JSON object: ids and pieces"},
};

std::string read_text(const ParsedArgs& args, const std::string& usage) {
  if (args.has("--prompt") && args.has("--file")) usage_fail("give -p/--prompt or -f/--file, not both");
  std::stringstream s;
  if (args.has("--file")) {
    std::ifstream in(args.str("--file"), std::ios::binary);
    if (!in) fail("--file: cannot open ", args.str("--file"));
    s << in.rdbuf();
    return s.str();
  }
  if (!args.has("--prompt")) usage_fail("--prompt or --file is required (usage: ", usage, ")");
  if (args.str("--prompt") != "-") return args.str("--prompt");
  s << std::cin.rdbuf();
  return s.str();
}

int run_tokenize(const std::vector<std::string>& argv) {
  ParsedArgs args = parse_args(argv, kOptions);
  const std::string usage = "nibble tokenize [MODEL_DIR] -p TEXT|-f FILE [--bos] [--ids|--json]";
  if (args.help) {
    std::cout << format_help(usage,
                             "Prints the token ids of TEXT under the model's tokenizer, one per line with\n"
                             "the text each decodes to (quoted, escaped). Without MODEL_DIR it uses the\n"
                             "shipped model. The weights are not loaded.",
                             kOptions);
    return 0;
  }
  if (args.has("--ids") && args.has("--json")) usage_fail("give --ids or --json, not both");
  const std::string dir = model_dir_arg(args, /*shipped_default=*/true, usage);
  const std::string text = read_text(args, usage);
  const std::string tok_path = Tokenizer::file_in(dir);  // tokenizer.json, else tiktoken.model
  if (tok_path.empty()) fail(dir, ": no tokenizer.json or tiktoken.model");
  const Tokenizer tok = Tokenizer::from_model_dir(dir);

  std::vector<int32_t> ids;
  if (args.has("--bos")) {
    const std::string cfg_path = dir + "/config.json";
    const nlohmann::json cfg = read_json_file(cfg_path);
    auto it = cfg.find("bos_token_id");
    if (it == cfg.end() || !it->is_number_integer() || !tok.has_id(it->get<int32_t>()))
      fail(cfg_path, ": field \"bos_token_id\" is missing or not an id of ", tok_path, " (--bos needs it)");
    ids.push_back(it->get<int32_t>());
  }
  tok.encode(text, /*allow_special=*/!args.has("--no-special"), ids);

  if (args.has("--ids")) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
  } else if (args.has("--json")) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok.token_bytes(id));
    nlohmann::json j = {{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (int32_t id : ids) std::printf("%8d  %s\n", id, quoted(tok.token_bytes(id)).c_str());
    std::fprintf(stderr, "[nibble] %zu tokens\n", ids.size());
  }
  return 0;
}

RegisterCommand reg({"tokenize", "print the token ids of a text (the weights are not loaded)", run_tokenize});

}  // namespace
}  // namespace nibble::cli
