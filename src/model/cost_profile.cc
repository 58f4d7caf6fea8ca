#include "model/cost_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>

#include "io/json_file.h"
#include "io/read_once.h"
#include "model/embedded_files.h"
#include "model/gpu.h"

namespace kvreplay {

namespace {

constexpr std::uint64_t kMaxProfileBytes = 1 << 20;
constexpr std::array<std::string_view, 4> kEngines = {"vllm", "sglang", "trtllm", "generic"};

// A key or value as messages show it: JSON, cut at 40 bytes.
std::string shown(const nlohmann::json& value) {
  const std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// Where errors point: the file and the line of a key's first occurrence.
class Where {
 public:
  Where(std::string name, std::string_view text) : name_(std::move(name)), text_(text) {}
  std::string at(const std::string& key) const {
    const std::size_t found = text_.find(nlohmann::json(key).dump());
    if (found == std::string_view::npos) return fmt::format("{}:1", name_);
    return fmt::format(
        "{}:{}", name_,
        1 + std::count(text_.begin(), text_.begin() + static_cast<std::ptrdiff_t>(found), '\n'));
  }
  Unexpected<std::string> fail(const std::string& key, const std::string& problem) const {
    return Unexpected{fmt::format("{}: cost profile: {}: {}", at(key), key, problem)};
  }

 private:
  std::string name_;
  std::string_view text_;
};

Result<CostProfile::Entry, std::string> parse_entry(const nlohmann::json& json, std::size_t index,
                                                    const Where& where) {
  const std::string self = fmt::format("profiles[{}]", index);
  if (!json.is_object()) return where.fail("profiles", self + " is not an object");
  CostProfile::Entry entry;
  entry.constants.resize(roofline_constant_infos().size());
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& key = it.key();
    if (key == "gpu" || key == "engine") {
      if (!it->is_string()) return where.fail(key, "expected a string, got " + shown(*it));
      std::string value = it->get<std::string>();
      if (key == "gpu" && value != "*") {
        const GpuSpec* gpu = find_gpu_preset(value);
        if (gpu == nullptr) {
          return where.fail(
              key, fmt::format("{}: unknown GPU (known: {}, or *)", shown(*it), gpu_preset_list()));
        }
        value = gpu->name;
      }
      if (key == "engine" && value != "*" &&
          std::find(kEngines.begin(), kEngines.end(), value) == kEngines.end()) {
        return where.fail(
            key,
            fmt::format("{}: unknown engine (vllm, sglang, trtllm, generic, or *)", shown(*it)));
      }
      (key == "gpu" ? entry.gpu : entry.engine) = std::move(value);
    } else if (key == "constants") {
      if (!it->is_object()) return where.fail(key, "expected an object, got " + shown(*it));
      for (auto c = it->begin(); c != it->end(); ++c) {
        const auto& infos = roofline_constant_infos();
        auto info = std::find_if(infos.begin(), infos.end(),
                                 [&](const RooflineConstantInfo& i) { return c.key() == i.name; });
        if (info == infos.end()) {
          std::string known;
          for (const auto& i : infos) known += (known.empty() ? "" : ", ") + std::string(i.name);
          return where.fail(c.key(), fmt::format("unknown constant (known: {})", known));
        }
        const nlohmann::json& v = *c;
        auto value = v.is_object() ? v.find("value") : v.end();
        auto source = v.is_object() ? v.find("source") : v.end();
        if (value == v.end() || !value->is_number() || source == v.end() || !source->is_string() ||
            source->get<std::string>().empty() || v.size() != 2) {
          return where.fail(c.key(), fmt::format("expected {{\"value\": NUMBER, \"source\": "
                                                 "\"where it comes from\"}}, got {}",
                                                 shown(v)));
        }
        const double x = value->get<double>();
        if (!(x >= info->lo && x <= info->hi)) {
          return where.fail(c.key(), fmt::format("{} is outside {}'s range [{}, {}]", shown(*value),
                                                 info->option, info->lo, info->hi));
        }
        entry.constants[static_cast<std::size_t>(info - infos.begin())] =
            CostProfile::Constant{x, source->get<std::string>()};
      }
    } else {
      return where.fail(key, self + ": unknown key (gpu, engine, constants)");
    }
  }
  return entry;
}

}  // namespace

const std::vector<RooflineConstantInfo>& roofline_constant_infos() {
  static const std::vector<RooflineConstantInfo> kInfos = {
      {"prefill_efficiency", "--prefill-efficiency",
       "roofline: share of the dense peak FLOPs a prefill chunk reaches", 1e-3, 1.0,
       &RooflineConstants::prefill_efficiency},
      {"decode_efficiency", "--decode-efficiency",
       "roofline: share of the dense peak FLOPs a decode reaches", 1e-3, 1.0,
       &RooflineConstants::decode_efficiency},
      {"fp8_efficiency", "--fp8-efficiency",
       "roofline: factor on both for a W8A8 model's linear layers at the fp8 peak", 1e-3, 1.0,
       &RooflineConstants::fp8_efficiency},
      {"bandwidth_efficiency", "--bandwidth-efficiency",
       "roofline: share of HBM bandwidth reached reading weights and KV", 1e-3, 1.0,
       &RooflineConstants::bandwidth_efficiency},
      {"link_efficiency", "--link-efficiency",
       "roofline: share of the GPU link's bandwidth an all-reduce reaches", 1e-3, 1.0,
       &RooflineConstants::link_efficiency},
      {"allreduce_latency_us", "--allreduce-latency-us",
       "roofline: fixed cost of one all-reduce across 2 GPUs, us (x log2(tp) at larger tp)", 0.0,
       1e6, &RooflineConstants::allreduce_latency_us},
      {"step_overhead_ms", "--step-overhead-ms",
       "roofline: fixed ms per step (scheduler, sampling, launch)", 0.0, 1e6,
       &RooflineConstants::step_overhead_ms},
      {"prefill_pass_ms", "--prefill-pass-ms",
       "roofline: fixed ms more for a step that runs prompt tokens (outside the decode CUDA "
       "graphs)",
       0.0, 1e6, &RooflineConstants::prefill_pass_ms},
      {"request_overhead_ms", "--request-overhead-ms",
       "roofline: ms a request spends in the server outside the engine's steps (HTTP, "
       "tokenization), in its TTFT and end-to-end latency",
       0.0, 1e6, &RooflineConstants::request_overhead_ms},
      {"expert_efficiency", "--expert-efficiency",
       "roofline: factor on the bandwidth share for a MoE's routed experts (fused MoE's "
       "grouped GEMM)",
       1e-3, 1.0, &RooflineConstants::expert_efficiency},
      {"layer_overhead_us", "--layer-overhead-us",
       "roofline: fixed us per layer per step (its kernels' floor at a small batch)", 0.0, 1e4,
       &RooflineConstants::layer_overhead_us},
  };
  return kInfos;
}

const CostProfile& CostProfile::shipped() {
  static const CostProfile kShipped = [] {
    for (const EmbeddedFile& file : embedded_model_data()) {
      if (file.name != "cost_profile") continue;
      auto parsed = parse(nlohmann::json::parse(file.bytes()), "shipped", file.bytes());
      // The build's tests read it; a broken shipped profile is a defect.
      if (parsed) {
        CostProfile shipped = std::move(parsed).value();
        shipped.over_shipped_ = false;  // it is the base
        return shipped;
      }
      fmt::print(stderr, "kvreplay: internal error: {}\n", parsed.error());
      std::abort();
    }
    return CostProfile{"shipped", "", {}};
  }();
  return kShipped;
}

Result<CostProfile, std::string> CostProfile::load(const std::string& path) {
  // Read once a run, text and document (a FIFO or a pipe has no second
  // reading; calibrate resolves its options for every workload).
  struct Tag;
  return read_once<Tag>(path, [](const std::string& file) -> Result<CostProfile, std::string> {
    auto json = read_json_text(file, kMaxProfileBytes, "not a cost profile");
    if (!json) return Unexpected{json.error()};
    return parse(json.value().document, file, json.value().text);
  });
}

Result<CostProfile, std::string> CostProfile::parse(const nlohmann::json& document,
                                                    const std::string& name,
                                                    std::string_view text) {
  const Where where(name, text);
  if (!document.is_object()) {
    return Unexpected{
        fmt::format("{}:1: cost profile: not a JSON object (see README, \"Cost "
                    "profiles\")",
                    name)};
  }
  auto version = document.find("kvreplay_cost_profile");
  if (version == document.end() || *version != 1) {
    return where.fail("kvreplay_cost_profile", "missing, or not 1 (the format's version)");
  }
  CostProfile out;
  out.name_ = name;
  out.over_shipped_ = true;
  for (auto it = document.begin(); it != document.end(); ++it) {
    if (it.key() == "kvreplay_cost_profile") continue;
    if (it.key() == "base") {
      if (*it != "shipped" && *it != "built-in") {
        return where.fail(it.key(), "expected \"shipped\" or \"built-in\", got " + shown(*it));
      }
      out.over_shipped_ = *it == "shipped";
      out.base_built_in_ = !out.over_shipped_;
    } else if (it.key() == "description") {
      if (!it->is_string()) return where.fail(it.key(), "expected a string");
      out.description_ = it->get<std::string>();
    } else if (it.key() == "profiles") {
      if (!it->is_array()) return where.fail(it.key(), "expected an array, got " + shown(*it));
      for (std::size_t i = 0; i < it->size(); ++i) {
        auto parsed = parse_entry((*it)[i], i, where);
        if (!parsed) return Unexpected{parsed.error()};
        Entry entry = std::move(parsed).value();
        for (const Entry& e : out.entries_) {
          if (e.gpu == entry.gpu && e.engine == entry.engine) {
            return where.fail("profiles", fmt::format("profiles[{}] repeats gpu {} engine {}", i,
                                                      entry.gpu, entry.engine));
          }
        }
        out.entries_.push_back(std::move(entry));
      }
    } else {
      return where.fail(it.key(),
                        "unknown key (kvreplay_cost_profile, base, description, profiles)");
    }
  }
  return out;
}

std::vector<const CostProfile::Entry*> CostProfile::matching(std::string_view gpu,
                                                             std::string_view engine) const {
  std::vector<const Entry*> out;
  // */*, */E, G/*, G/E: the GPU is more specific than the engine.
  for (int rank = 0; rank < 4; ++rank) {
    const bool by_gpu = rank >= 2, by_engine = rank % 2 == 1;
    for (const Entry& e : entries_) {
      if ((e.gpu != "*") == by_gpu && (e.engine != "*") == by_engine && (!by_gpu || e.gpu == gpu) &&
          (!by_engine || e.engine == engine)) {
        out.push_back(&e);
      }
    }
  }
  return out;
}

RooflineConstants CostProfile::constants_for(std::string_view gpu, std::string_view engine) const {
  RooflineConstants out =
      over_shipped_ ? shipped().constants_for(gpu, engine) : RooflineConstants{};
  const auto& infos = roofline_constant_infos();
  for (const Entry* e : matching(gpu, engine)) {
    for (std::size_t i = 0; i < infos.size(); ++i) {
      if (e->constants[i]) out.*infos[i].field = e->constants[i]->value;
    }
  }
  return out;
}

std::vector<std::string> CostProfile::sources_for(std::string_view gpu,
                                                  std::string_view engine) const {
  std::vector<std::string> out =
      over_shipped_ ? shipped().sources_for(gpu, engine)
                    : std::vector<std::string>(roofline_constant_infos().size(), "built-in");
  for (const Entry* e : matching(gpu, engine)) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (e->constants[i]) out[i] = e->constants[i]->source;
    }
  }
  return out;
}

nlohmann::json CostProfile::to_json() const {
  nlohmann::json profiles = nlohmann::json::array();
  const auto& infos = roofline_constant_infos();
  for (const Entry& e : entries_) {
    nlohmann::json constants = nlohmann::json::object();
    for (std::size_t i = 0; i < infos.size(); ++i) {
      if (e.constants[i]) {
        constants[infos[i].name] = {{"value", e.constants[i]->value},
                                    {"source", e.constants[i]->source}};
      }
    }
    profiles.push_back({{"gpu", e.gpu}, {"engine", e.engine}, {"constants", constants}});
  }
  nlohmann::json out = {{"kvreplay_cost_profile", 1}};
  if (base_built_in_) out["base"] = "built-in";
  if (!description_.empty()) out["description"] = description_;
  out["profiles"] = profiles;
  return out;
}

}  // namespace kvreplay
