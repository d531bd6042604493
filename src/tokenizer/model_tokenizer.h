// A model folder's tokenizer, found in one place for every command and the
// Engine: which file a folder's tokenizer lives in, and loading it. Today
// that is tokenizer.json (HF `tokenizers` format); formats that other
// publishers ship (e.g. a tiktoken ranks file) are added here, so that no
// caller names a file.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/tokenizer.h"

namespace nibble {

// The path of `dir`'s tokenizer file, or "" when the folder has none.
std::string model_tokenizer_path(const std::string& dir);

// What a folder without a tokenizer lacks, for error messages:
// "no tokenizer.json".
std::string missing_tokenizer_text();

// The folder's tokenizer, or nullopt when it has none. A file that is there
// but broken throws nibble::Error naming it.
std::optional<Tokenizer> load_model_tokenizer(const std::string& dir);

}  // namespace nibble
