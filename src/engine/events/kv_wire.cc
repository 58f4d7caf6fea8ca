#include "engine/events/kv_wire.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <optional>
#include <string_view>
#include <utility>

namespace kvreplay {

namespace {

using json = nlohmann::json;

// The deepest nesting decoded: a batch is 4 deep (batch, events, event,
// block_hashes), extra_keys' tuples a few more; a payload nested deeper is
// refused before nlohmann's recursive reader could exhaust the stack.
constexpr std::size_t kMaxDepth = 32;

// nlohmann's DOM builder, with the depth bounded and the reader's error kept.
class BoundedSax : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  explicit BoundedSax(json& out) : json_sax_dom_parser(out, false) {}
  bool start_object(std::size_t n) { return deeper() && json_sax_dom_parser::start_object(n); }
  bool end_object() {
    --depth_;
    return json_sax_dom_parser::end_object();
  }
  bool start_array(std::size_t n) { return deeper() && json_sax_dom_parser::start_array(n); }
  bool end_array() {
    --depth_;
    return json_sax_dom_parser::end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/, const Exception& ex) {
    // "[json.exception.parse_error.110] parse error at byte 3: ...": from "parse error".
    std::string_view what = ex.what();
    if (auto at = what.find("] "); at != std::string_view::npos) what.remove_prefix(at + 2);
    error = std::string(what);
    return false;
  }
  std::string error;

 private:
  bool deeper() {
    if (++depth_ <= kMaxDepth) return true;
    error = fmt::format("nested deeper than {} levels", kMaxDepth);
    return false;
  }
  std::size_t depth_ = 0;
};

std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "nil";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::binary: return "bytes";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "a map";
    case json::value_t::number_float: return "a float";
    default: return "an integer";
  }
}

std::string hex(const json::binary_t& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t byte : bytes) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

// A value as JSON, bytes anywhere inside as hex strings.
json plain(const json& value) {
  if (value.is_binary()) return hex(value.get_binary());
  if (value.is_array()) {
    json out = json::array();
    for (const json& item : value) out.push_back(plain(item));
    return out;
  }
  if (value.is_object()) {
    json out = json::object();
    for (const auto& [key, item] : value.items()) out[key] = plain(item);
    return out;
  }
  return value;
}

struct Failure {
  std::string message;
};
using Status = Result<void, Failure>;

Unexpected<Failure> fail(const std::string& field, std::string_view what, const json& got) {
  return Unexpected{Failure{fmt::format("{}: expected {}, got {}", field, what, describe(got))}};
}

// ExternalBlockHash (bytes | int) as a string.
Result<json, Failure> hash_text(const std::string& field, const json& value) {
  if (value.is_number_unsigned()) return json(std::to_string(value.get<std::uint64_t>()));
  if (value.is_number_integer()) return json(std::to_string(value.get<std::int64_t>()));
  if (value.is_binary()) return json(hex(value.get_binary()));
  return fail(field, "a block hash (an integer or bytes)", value);
}

Result<json, Failure> hashes_text(const std::string& field, const json& value) {
  if (!value.is_array()) return fail(field, "an array of block hashes", value);
  json out = json::array();
  for (std::size_t i = 0; i < value.size(); ++i) {
    auto hash = hash_text(fmt::format("{}[{}]", field, i), value[i]);
    if (!hash) return Unexpected{hash.error()};
    out.push_back(std::move(hash.value()));
  }
  return out;
}

// The fields of BlockStored and BlockRemoved in declaration order (the array
// form's positions after the tag); `required`: how many of them every vLLM
// sends (array_like omits only trailing defaults, and the oldest form ends
// after lora_id, or after block_hashes for BlockRemoved).
struct EventShape {
  std::string_view tag;
  std::array<std::string_view, 11> fields;
  std::size_t count = 0;
  std::size_t required = 0;
};
constexpr EventShape kStored{
    "BlockStored",
    {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
     "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
    11,
    5};
constexpr EventShape kRemoved{"BlockRemoved", {"block_hashes", "medium", "group_idx"}, 3, 1};
constexpr EventShape kCleared{"AllBlocksCleared", {}, 0, 0};

// One field's value checked and written into `out`.
Status put_field(json& out, std::string_view name, const std::string& where, const json& value) {
  const std::string field = fmt::format("{}.{}", where, name);
  if (name == "block_hashes") {
    auto hashes = hashes_text(field, value);
    if (!hashes) return Unexpected{hashes.error()};
    out["block_hashes"] = std::move(hashes.value());
  } else if (name == "parent_block_hash") {
    if (value.is_null()) {
      out["parent_block_hash"] = nullptr;
    } else {
      auto hash = hash_text(field, value);
      if (!hash) return Unexpected{hash.error()};
      out["parent_block_hash"] = std::move(hash.value());
    }
  } else if (name == "token_ids") {
    if (!value.is_array()) return fail(field, "an array of integers", value);
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_number_unsigned()) {
        return fail(fmt::format("{}[{}]", field, i), "a token id (an integer of 0 or more)",
                    value[i]);
      }
    }
    out["token_ids"] = value;
  } else if (name == "block_size") {
    if (!value.is_number_unsigned()) return fail(field, "an integer of 0 or more", value);
    out["block_size"] = value;
  } else if (name == "lora_id" || name == "group_idx" || name == "kv_cache_spec_sliding_window") {
    if (!value.is_null() && !value.is_number_integer()) {
      return fail(field, "an integer or nil", value);
    }
    out[std::string(name)] = value;
  } else if (name == "medium" || name == "lora_name" || name == "kv_cache_spec_kind") {
    if (!value.is_null() && !value.is_string()) return fail(field, "a string or nil", value);
    out[std::string(name)] = value;
  } else {
    out[std::string(name)] = plain(value);  // extra_keys
  }
  return {};
}

Result<const EventShape*, Failure> shape_of(const std::string& field, const json& tag) {
  if (!tag.is_string()) return fail(field, "the event's type (a string)", tag);
  const auto& name = tag.get_ref<const std::string&>();
  for (const EventShape* shape : {&kStored, &kRemoved, &kCleared}) {
    if (name == shape->tag) return shape;
  }
  return Unexpected{Failure{
      fmt::format("{}: unknown event type \"{}\" (BlockStored, BlockRemoved or AllBlocksCleared)",
                  field, name)}};
}

// One event, from either form, as kvreplay writes it.
Result<json, Failure> event_json(const std::string& where, const json& event,
                                 WireBatchCounts& counts) {
  const bool is_array = event.is_array();
  if (!is_array && !event.is_object()) {
    return fail(where, "an event (an array or a map)", event);
  }
  if (is_array && event.empty()) return fail(where + ".type", "the event's type first", event);
  if (!is_array && !event.contains("type")) {
    return Unexpected{Failure{where + ".type: missing (a map event names its type)"}};
  }
  auto shape = shape_of(where + ".type", is_array ? event[0] : event["type"]);
  if (!shape) return Unexpected{shape.error()};
  const EventShape& s = *shape.value();
  json out = json::object();
  out["type"] = s.tag;
  if (s.count > 0) out["medium"] = nullptr;  // an older vLLM's events have none
  for (std::size_t i = 0; i < s.count; ++i) {
    const std::string_view name = s.fields[i];
    const json* value = nullptr;
    if (is_array) {
      if (i + 1 < event.size()) value = &event[i + 1];
    } else if (auto it = event.find(std::string(name)); it != event.end()) {
      value = &*it;
    }
    if (value == nullptr) {
      if (i < s.required) {
        return Unexpected{Failure{fmt::format("{}.{}: missing ({} needs it)", where, name, s.tag)}};
      }
      continue;
    }
    if (auto r = put_field(out, name, where, *value); !r) return Unexpected{r.error()};
  }
  if (&s == &kStored) ++counts.stored;
  if (&s == &kRemoved) ++counts.removed;
  if (&s == &kCleared) ++counts.cleared;
  return out;
}

Result<std::string, Failure> batch_line(const json& batch, WireBatchCounts& counts) {
  const json* ts = nullptr;
  const json* events = nullptr;
  const json* rank = nullptr;
  if (batch.is_array()) {
    if (batch.size() > 0) ts = &batch[0];
    if (batch.size() > 1) events = &batch[1];
    if (batch.size() > 2) rank = &batch[2];
  } else if (batch.is_object()) {
    auto find = [&batch](const char* key) -> const json* {
      auto it = batch.find(key);
      return it == batch.end() ? nullptr : &*it;
    };
    ts = find("ts");
    events = find("events");
    rank = find("data_parallel_rank");
  } else {
    return fail("the batch", "a KVEventBatch (an array or a map)", batch);
  }
  if (ts == nullptr) return Unexpected{Failure{"ts: missing"}};
  if (!ts->is_number()) return fail("ts", "a number", *ts);
  if (events == nullptr) return Unexpected{Failure{"events: missing"}};
  if (!events->is_array()) return fail("events", "an array", *events);
  json out = json::object();
  out["ts"] = *ts;
  if (rank != nullptr && !rank->is_null()) {
    if (!rank->is_number_unsigned()) return fail("data_parallel_rank", "an integer or nil", *rank);
    out["data_parallel_rank"] = *rank;
  }
  json list = json::array();
  WireBatchCounts mine;
  for (std::size_t i = 0; i < events->size(); ++i) {
    auto event = event_json(fmt::format("events[{}]", i), (*events)[i], mine);
    if (!event) return Unexpected{event.error()};
    list.push_back(std::move(event.value()));
  }
  out["events"] = std::move(list);
  counts.stored += mine.stored;
  counts.removed += mine.removed;
  counts.cleared += mine.cleared;
  return out.dump() + "\n";
}

}  // namespace

Result<std::string, std::string> kv_batch_line_from_msgpack(std::span<const std::uint8_t> payload,
                                                            WireBatchCounts& counts) {
  if (payload.empty()) return Unexpected{std::string("the payload is empty")};
  if (payload.size() > kMaxWirePayload) {
    return Unexpected{fmt::format("the payload has {} bytes, more than the {} MiB a batch may have",
                                  payload.size(), kMaxWirePayload >> 20)};
  }
  json batch;
  BoundedSax sax(batch);
  const bool parsed =
      json::sax_parse(payload.begin(), payload.end(), &sax, json::input_format_t::msgpack, true);
  if (!parsed) {
    return Unexpected{"not msgpack: " +
                      (sax.error.empty() ? std::string("cannot be read") : sax.error)};
  }
  auto line = batch_line(batch, counts);
  if (!line) return Unexpected{line.error().message};
  return std::move(line.value());
}

}  // namespace kvreplay
