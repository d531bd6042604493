#include "tokenizer/stream_decoder.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nibble {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& bytes = tokenizer_->token_bytes(id);  // throws before any state changes
  std::string out;
  if (skip_special_ && tokenizer_->is_special(id)) return out;
  pending_ += bytes;
  const size_t used = utf8_lossy_append(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8_lossy_append(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace nibble
