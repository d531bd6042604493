#include "tokenizer/chat_harmony.h"

#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace nibble {
namespace {

// Tool schemas keep their key order: harmony writes properties in the order
// the request gave them.
using ojson = nlohmann::ordered_json;

// ---- JSON schema -> TypeScript --------------------------------------------
// openai-harmony's rendering, quirks included (a oneOf property's comment
// lines, "T[]" after an enum union, defaults quoted or not by type), since
// the model was trained on exactly this text.

bool is_enum(const ojson& s) { return s.is_object() && s.contains("enum") && s["enum"].is_array() && !s["enum"].empty(); }
bool nullable(const ojson& s) { return s.is_object() && s.value("nullable", ojson(false)).is_boolean() && s.value("nullable", false); }
const std::string* str_field(const ojson& s, const char* key) {
  if (!s.is_object()) return nullptr;
  const auto it = s.find(key);
  return it != s.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}
// serde_json's Display of a value: compact JSON.
std::string display(const ojson& v) { return v.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// A default as a property line shows it: a string bare when the property is
// an enum (its values are already quoted in the type), quoted otherwise.
std::string property_default(const ojson& owner, const ojson& d) {
  if (d.is_string()) return is_enum(owner) ? d.get<std::string>() : "\"" + d.get<std::string>() + "\"";
  return display(d);
}

std::string with_null(std::string t, const ojson& s) {
  if (nullable(s) && t.find("null") == std::string::npos) t += " | null";
  return t;
}

std::string to_ts(const ojson& s, const std::string& indent);

void object_property(const std::string& key, const ojson& val, bool required, const std::string& indent,
                     std::string& out) {
  if (const std::string* title = str_field(val, "title")) out += indent + "// " + *title + "\n" + indent + "//\n";
  const bool one_of = val.is_object() && val.contains("oneOf") && val["oneOf"].is_array();
  if (!val.is_object() || !val.contains("oneOf"))
    if (const std::string* d = str_field(val, "description")) out += indent + "// " + *d + "\n";
  if (val.is_object() && val.contains("examples") && val["examples"].is_array() && !val["examples"].empty()) {
    out += indent + "// Examples:\n";
    for (const ojson& ex : val["examples"])
      if (ex.is_string()) out += indent + "// - \"" + ex.get<std::string>() + "\"\n";
  }
  if (one_of) {
    const ojson& arr = val["oneOf"];
    const std::string* prop_desc = str_field(val, "description");
    const std::string* first_desc = arr.empty() ? nullptr : str_field(arr[0], "description");
    const bool skip = prop_desc && first_desc && *prop_desc == *first_desc;
    bool above = false;
    if (!skip && prop_desc) {
      out += indent + "// " + *prop_desc + "\n";
      above = true;
    }
    if (val.contains("default")) out += indent + "// default: " + property_default(val, val["default"]) + "\n";
    out += indent + key + (required ? "" : "?") + ":\n";
    for (size_t i = 0; i < arr.size(); ++i) {
      const ojson& variant = arr[i];
      out += indent + " | " + with_null(to_ts(variant, indent + "   "), variant);
      std::vector<std::string> trailing;
      if (!(i == 0 && above))
        if (const std::string* d = str_field(variant, "description"); d && (!prop_desc || *d != *prop_desc))
          trailing.push_back(*d);
      if (variant.is_object() && variant.contains("default"))
        trailing.push_back("default: " + property_default(variant, variant["default"]));
      if (!trailing.empty()) {
        out += " //";
        for (const auto& t : trailing) out += " " + t;
      }
      out += "\n";
    }
    out += indent + ",\n";
    return;
  }
  out += indent + key + (required ? "" : "?") + ": " + with_null(to_ts(val, indent + "    "), val) + ",";
  if (val.is_object() && val.contains("default") && !val.contains("oneOf"))
    out += " // default: " + property_default(val, val["default"]);
  out += "\n";
}

std::string to_ts(const ojson& s, const std::string& indent) {
  if (!s.is_object()) return "any";
  if (s.contains("oneOf") && s["oneOf"].is_array()) {
    // A union at the top of a schema: one "| T // comments" line per variant.
    std::string out;
    for (const ojson& variant : s["oneOf"]) {
      out += "\n" + indent + " | " + with_null(to_ts(variant, indent + "   "), variant);
      std::vector<std::string> trailing;
      if (const std::string* d = str_field(variant, "description")) trailing.push_back(*d);
      if (variant.is_object() && variant.contains("default")) {
        const ojson& d = variant["default"];
        trailing.push_back("default: " +
                           (d.is_string() && !is_enum(variant) ? "\"" + d.get<std::string>() + "\"" : display(d)));
      }
      if (!trailing.empty()) {
        out += " //";
        for (const auto& t : trailing) out += " " + t;
      }
    }
    return out;
  }
  const auto type = s.find("type");
  if (type != s.end() && type->is_array()) {
    std::string out;
    for (const ojson& t : *type) {
      if (!t.is_string()) continue;
      if (!out.empty()) out += " | ";
      out += t == "integer" ? "number" : t.get<std::string>();
    }
    if (!out.empty()) return out;
  }
  if (type == s.end() || !type->is_string()) return "any";
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "object") {
    std::string out;
    if (const std::string* d = str_field(s, "description")) out += indent + "// " + *d + "\n";
    out += "{\n";
    if (s.contains("properties") && s["properties"].is_object()) {
      std::set<std::string> required;
      if (s.contains("required") && s["required"].is_array())
        for (const ojson& r : s["required"])
          if (r.is_string()) required.insert(r.get<std::string>());
      for (const auto& [key, val] : s["properties"].items()) object_property(key, val, required.count(key) > 0, indent, out);
    }
    return out + indent + "}";
  }
  if (t == "string") {
    if (is_enum(s)) {
      std::string out;
      for (const ojson& v : s["enum"]) {
        if (!v.is_string()) continue;
        if (!out.empty()) out += " | ";
        out += "\"" + v.get<std::string>() + "\"";
      }
      if (!out.empty()) return out;
    }
    return "string";
  }
  if (t == "number" || t == "integer") return "number";
  if (t == "boolean") return "boolean";
  if (t == "array") return s.contains("items") ? to_ts(s["items"], indent) + "[]" : "Array<any>";
  return "any";
}

// ---- messages ---------------------------------------------------------------

// Lines as Rust's str::lines() gives them: split at '\n', a trailing '\r'
// dropped, no empty last line after a final '\n'.
std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t nl = s.find('\n', at);
    if (nl == std::string::npos) nl = s.size();
    std::string line = s.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    at = nl + 1;
  }
  return out;
}

struct FunctionTool {
  std::string name;
  std::string description;
  std::optional<ojson> parameters;
};

std::vector<FunctionTool> parse_tools(const std::string& text, size_t message) {
  const std::string at = "harmony chat: message " + std::to_string(message) + ": tools";
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const ojson::exception& e) {
    fail(at, ": malformed JSON: ", e.what());
  }
  if (!j.is_array()) fail(at, ": expected an array of tools");
  std::vector<FunctionTool> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string ai = at + "[" + std::to_string(i) + "]";
    const ojson& t = j[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object())
      fail(ai, ": expected {\"type\": \"function\", \"function\": {...}}");
    const ojson& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      fail(ai, ".function.name: missing or not a string");
    FunctionTool ft;
    ft.name = f["name"];
    if (f.contains("description") && !f["description"].is_null()) {
      if (!f["description"].is_string()) fail(ai, ".function.description: not a string");
      ft.description = f["description"];
    }
    if (f.contains("parameters") && !f["parameters"].is_null()) ft.parameters = f["parameters"];
    out.push_back(std::move(ft));
  }
  return out;
}

std::string tools_section(const std::vector<FunctionTool>& tools) {
  std::vector<std::string> items = {"## functions\n", "namespace functions {\n"};
  for (const FunctionTool& t : tools) {
    for (const std::string& l : lines(t.description)) items.push_back("// " + l);
    if (t.parameters) items.push_back("type " + t.name + " = (_: " + to_ts(*t.parameters, "") + ") => any;\n");
    else items.push_back("type " + t.name + " = () => any;\n");
  }
  items.push_back("} // namespace functions");
  std::string body;
  for (size_t i = 0; i < items.size(); ++i) body += (i ? "\n" : "") + items[i];
  return "# Tools\n\n" + body;
}

// One harmony message before rendering.
struct HMessage {
  std::string author;        // role, or the tool's name for tool messages
  bool assistant = false;
  std::string recipient;     // "" = none
  std::string channel;       // "" = none
  bool constrain_json = false;
  std::string content;
};

const char* effort_name(ReasoningEffort e) {
  switch (e) {
    case ReasoningEffort::Low: return "low";
    case ReasoningEffort::High:
    case ReasoningEffort::Max: return "high";
    default: return "medium";
  }
}

std::vector<HMessage> to_harmony(std::span<const ChatMessage> messages, const HarmonyOptions& options) {
  std::vector<std::string> instructions;
  std::vector<FunctionTool> tools;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != ChatRole::System && m.role != ChatRole::Developer) continue;
    if (!m.content.empty()) instructions.push_back(m.content);
    if (!m.tools.empty())
      for (FunctionTool& t : parse_tools(m.tools, i)) tools.push_back(std::move(t));
  }

  std::string system = "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06";
  if (!options.date.empty()) system += "\nCurrent date: " + options.date;
  system += std::string("\n\nReasoning: ") + effort_name(options.effort);
  system += "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.";
  if (!tools.empty()) system += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  std::vector<HMessage> out = {{"system", false, "", "", false, system}};

  if (!instructions.empty() || !tools.empty()) {
    std::vector<std::string> sections;
    if (!instructions.empty()) {
      std::string joined;
      for (size_t i = 0; i < instructions.size(); ++i) joined += (i ? "\n\n" : "") + instructions[i];
      sections = {"# Instructions", joined};
    }
    if (!tools.empty()) sections.push_back(tools_section(tools));
    std::string dev;
    for (size_t i = 0; i < sections.size(); ++i) dev += (i ? "\n\n" : "") + sections[i];
    out.push_back({"developer", false, "", "", false, dev});
  }

  std::map<std::string, std::string> call_names;  // tool_call id -> function name
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    switch (m.role) {
      case ChatRole::System:
      case ChatRole::Developer: break;
      case ChatRole::User: out.push_back({"user", false, "", "", false, m.content}); break;
      case ChatRole::Assistant:
        if (m.reasoning_content && !m.reasoning_content->empty())
          out.push_back({"assistant", true, "", "analysis", false, *m.reasoning_content});
        if (m.tool_calls.empty()) {
          out.push_back({"assistant", true, "", "final", false, m.content});
          break;
        }
        if (!m.content.empty()) out.push_back({"assistant", true, "", "commentary", false, m.content});
        for (const ToolCall& c : m.tool_calls) {
          if (c.name.empty()) fail("harmony chat: message ", i, ": a tool call without a function name");
          call_names[c.id] = c.name;
          out.push_back({"assistant", true, "functions." + c.name, "commentary", true, c.arguments});
        }
        break;
      case ChatRole::Tool: {
        const auto it = call_names.find(m.tool_call_id);
        if (it == call_names.end())
          fail("harmony chat: message ", i, " (tool): tool_call_id '", m.tool_call_id,
               "' answers no earlier tool call (harmony names the tool that answers)");
        out.push_back({"functions." + it->second, false, "assistant", "commentary", false, m.content});
        break;
      }
    }
  }

  // openai-harmony's auto_drop_analysis: when the last assistant message is a
  // final answer, analysis before the first final answer is dropped.
  bool last_is_final = false;
  for (auto it = out.rbegin(); it != out.rend(); ++it)
    if (it->assistant) {
      last_is_final = it->channel == "final";
      break;
    }
  if (last_is_final) {
    size_t first_final = out.size();
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].channel == "final") {
        first_final = i;
        break;
      }
    std::vector<HMessage> kept;
    for (size_t i = 0; i < out.size(); ++i)
      if (!(i < first_final && out[i].channel == "analysis")) kept.push_back(std::move(out[i]));
    out = std::move(kept);
  }
  return out;
}

// Where rendered pieces go: ids (each text piece encoded on its own) or text.
class Sink {
 public:
  explicit Sink(const TokenizeFn* tokenize) : tokenize_(tokenize) {}
  void special(const char* token) {
    if (!tokenize_) {
      text_ += token;
      return;
    }
    const std::vector<int32_t> id = (*tokenize_)(token, /*allow_special=*/true);
    if (id.size() != 1) fail("harmony chat: the tokenizer has no token ", token, " (not a harmony tokenizer)");
    ids_.push_back(id[0]);
  }
  void text(const std::string& s) {
    if (!tokenize_) {
      text_ += s;
      return;
    }
    if (s.empty()) return;
    const std::vector<int32_t> piece = (*tokenize_)(s, /*allow_special=*/false);
    ids_.insert(ids_.end(), piece.begin(), piece.end());
  }
  std::vector<int32_t>& ids() { return ids_; }
  std::string& rendered() { return text_; }

 private:
  const TokenizeFn* tokenize_;
  std::vector<int32_t> ids_;
  std::string text_;
};

void render(std::span<const ChatMessage> messages, const HarmonyOptions& options, Sink& sink) {
  for (const HMessage& m : to_harmony(messages, options)) {
    sink.special("<|start|>");
    sink.text(m.author);
    if (!m.recipient.empty()) sink.text(" to=" + m.recipient);
    if (!m.channel.empty()) {
      sink.special("<|channel|>");
      sink.text(m.channel);
    }
    if (m.constrain_json) {
      sink.text(" ");
      sink.special("<|constrain|>");
      sink.text("json");
    }
    sink.special("<|message|>");
    sink.text(m.content);
    sink.special(m.assistant && !m.recipient.empty() ? "<|call|>" : "<|end|>");
  }
  sink.special("<|start|>");
  sink.text("assistant");
}

}  // namespace

std::vector<int32_t> encode_harmony_chat(std::span<const ChatMessage> messages, const HarmonyOptions& options,
                                         const TokenizeFn& tokenize) {
  Sink sink(&tokenize);
  render(messages, options, sink);
  return std::move(sink.ids());
}

std::vector<int32_t> encode_harmony_chat(std::span<const ChatMessage> messages, const HarmonyOptions& options,
                                         const Tokenizer& tokenizer) {
  const TokenizeFn fn = [&](const std::string& text, bool allow_special) {
    return tokenizer.encode(text, allow_special);
  };
  return encode_harmony_chat(messages, options, fn);
}

std::string render_harmony_chat(std::span<const ChatMessage> messages, const HarmonyOptions& options) {
  Sink sink(nullptr);
  render(messages, options, sink);
  return std::move(sink.rendered());
}

std::string harmony_schema_typescript(const std::string& schema_json, const std::string& indent) {
  ojson j;
  try {
    j = ojson::parse(schema_json);
  } catch (const ojson::exception& e) {
    fail("harmony tool schema: malformed JSON: ", e.what());
  }
  return to_ts(j, indent);
}

}  // namespace nibble
