// What `nibble run` and `nibble chat` share: the model + tokenizer pair, the
// sampling flags (defaults from generation_config.json, then the model
// card's temperature 1.0 / top_p 1.0), stop tokens (the model's EOS and
// generation_config.json's eos_token_id) and stop strings (--stop), the
// context cap (-c/--ctx-size), and streaming generated text.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/args.h"
#include "nibble/engine.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace nibble::cli {

// The model used when no MODEL_DIR is given: models/dsv4-tiny under the
// install prefix of the running binary (PREFIX/share/nibble, see `cmake
// --install`), else the source tree it was built from.
std::string shipped_model_dir();

struct TextModel {
  std::string dir;
  std::unique_ptr<Engine> engine;
  Tokenizer tokenizer;       // the CLI's own: streaming detokenization and chat encoding need more than the Engine's
  int64_t context = 0;       // tokens one sequence may hold: the model's, or less with -c/--ctx-size
  double load_seconds = 0;   // model and tokenizer
};

// Flags every text command accepts (model, sampling, threads, backends).
std::vector<OptionSpec> text_generation_options();

// The model (MODEL_DIR, -m, or the shipped one) and its tokenizer (none
// with `with_tokenizer` false: `run --tokens` works on token ids alone).
TextModel load_text_model(const ParsedArgs& args, const std::string& usage, bool with_tokenizer = true);

// The model's chat format (tokenizer/chat_format.h: from the architecture,
// else the tokenizer's special tokens), encoding with tm.tokenizer: `tm`
// must outlive it and not move.
std::unique_ptr<ChatFormat> chat_format_of(const TextModel& tm);

// Budget, stop tokens and sampler from the flags over generation_config.json
// (Engine::generation_defaults). A --seed of -1 draws one, printed on stderr
// so the run can be repeated.
GenerationParams generation_options(const ParsedArgs& args, const TextModel& tm);

// `gen` with its budget cut so that `prompt_tokens` more tokens after
// `position` and the reply fit in tm.context. Throws nibble::Error when the
// prompt alone does not fit. -n -1 means "until the context is full".
GenerationParams fit_to_context(const GenerationParams& gen, const TextModel& tm, int64_t position,
                                int64_t prompt_tokens);

// What one streamed completion produced.
struct Completion {
  GenerationResult result;
  std::string text;         // the text shown: cut before a stop string, if one matched
  std::string stop_string;  // the --stop string that ended it ("" if none did)
  bool interrupted = false; // Ctrl-C ended it (cli/interrupt.h)
  bool context_cap = false; // the -c/--ctx-size budget ended it
};

// What a reply's raw text looks like on the terminal: called with each
// piece as it comes and once with at_end; returns the text to write.
using ReplyView = std::function<std::string(std::string_view piece, bool at_end)>;

// The view of a format's replies: raw text for DeepSeek-V4 (nullptr);
// harmony's HarmonyTextView (tokenizer/harmony_reply.h): the analysis
// channel as "<think>\n...\n</think>\n\n" then the answer, no markers.
ReplyView reply_view_for(const ChatFormat& format);

// Generates from `prompt` (fed at the sequence's position) and writes the
// text to `out` as it comes (nothing when `out` is null; through `view`
// when given), cut at the first of `stop_strings`. Stops early at Ctrl-C. A
// failed write to `out` is an error (naming stdout). Completion::text is
// the raw text either way.
Completion stream_completion(const TextModel& tm, SeqId seq, std::span<const int32_t> prompt,
                             const GenerationParams& gen, const std::vector<std::string>& stop_strings,
                             std::FILE* out, const ReplyView& view = nullptr);

// One line on stderr: load time (when > 0), prompt and generation speed, and
// why generation ended.
void print_generation_stats(const Completion& c, double load_seconds = 0);

// `s` as a double-quoted JSON string: control characters and quotes escaped,
// invalid UTF-8 replaced, so a stop string prints on one readable line.
std::string quoted(const std::string& s);

}  // namespace nibble::cli
