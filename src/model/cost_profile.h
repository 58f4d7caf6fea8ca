// Cost profiles (SPEC 3.5): the roofline's constants (model/roofline.h) per
// GPU kind and engine, each with where it came from.
//
// A profile is one JSON object:
//
//   {"kvreplay_cost_profile": 1,
//    "description": "...",                          optional
//    "profiles": [
//      {"gpu": "h100-80gb" | "*", "engine": "vllm" | "sglang" | "trtllm" | "generic" | "*",
//       "constants": {"bandwidth_efficiency": {"value": 0.6, "source": "..."}, ...}},
//      ...]}
//
// The constants of a run on GPU G under engine E are the built-in values
// (RooflineConstants), then those of every entry that matches G and E, from the
// least specific to the most (*/*, */E, G/*, G/E): a constant an entry leaves
// out keeps the value before it. The command line's constant options come last.
// A profile read from a file goes over the shipped one: the shipped profile's
// constants first, then the file's, so a fit of one GPU kind leaves the others
// as shipped. "base": "built-in" starts from the built-in values instead
// ("base": "shipped", the default).
// Every constant needs a value within its option's range and a source (a
// sentence: the measurement, or the fit, it comes from). An error names the
// file, the line of the key and the key.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "model/roofline.h"

namespace kvreplay {

// One roofline constant: its name in a profile and the report, the option
// that sets it, its range, and where it sits in RooflineConstants.
struct RooflineConstantInfo {
  const char* name;    // bandwidth_efficiency
  const char* option;  // --bandwidth-efficiency
  const char* help;
  double lo, hi;
  double RooflineConstants::*field;
};
// Every constant, in the report's order.
const std::vector<RooflineConstantInfo>& roofline_constant_infos();

class CostProfile {
 public:
  struct Constant {
    double value = 0;
    std::string source;
  };
  struct Entry {
    std::string gpu = "*";     // a GPU preset's name, or *
    std::string engine = "*";  // vllm, sglang, generic, or *
    // By roofline_constant_infos()'s order; nullopt where the entry is silent.
    std::vector<std::optional<Constant>> constants;
  };

  // The profile shipped in the binary (src/model/cost_profile.json).
  static const CostProfile& shipped();
  // Reads --cost-profile FILE (or "-"); the error is one line naming FILE:LINE.
  static Result<CostProfile, std::string> load(const std::string& path);
  // From a parsed document; `name` opens every error ("FILE:LINE: ..." when
  // `text` is the file's text, for the lines).
  static Result<CostProfile, std::string> parse(const nlohmann::json& document,
                                                const std::string& name, std::string_view text);

  // The constants of a run on `gpu` (a preset's name) under `engine`.
  RooflineConstants constants_for(std::string_view gpu, std::string_view engine) const;
  // The source of each constant for that run ("built-in" where no entry sets it).
  std::vector<std::string> sources_for(std::string_view gpu, std::string_view engine) const;

  // What the report names it by: "shipped", or the path given.
  const std::string& name() const { return name_; }
  const std::vector<Entry>& entries() const { return entries_; }
  // The profile as JSON (what calibrate writes; parse() reads it back).
  nlohmann::json to_json() const;

  CostProfile() = default;
  CostProfile(std::string name, std::string description, std::vector<Entry> entries)
      : name_(std::move(name)),
        description_(std::move(description)),
        entries_(std::move(entries)) {}

 private:
  // The matching entries, least specific first.
  std::vector<const Entry*> matching(std::string_view gpu, std::string_view engine) const;

  std::string name_;
  std::string description_;
  std::vector<Entry> entries_;
  // Read from a file without "base": "built-in": the shipped constants first.
  bool over_shipped_ = false;
  bool base_built_in_ = false;  // the file said "base": "built-in"
};

}  // namespace kvreplay
