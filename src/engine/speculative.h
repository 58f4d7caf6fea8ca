// Speculative decoding (--speculative METHOD:K, SPEC 3.5): a draft proposes K
// tokens after each decoded one, and the target model verifies the K + 1 in
// one pass, keeping the drafts up to the first it rejects plus one token of
// its own.
//
// What a decode step of a request is then, as vLLM's V1 runs it
// (vllm/v1/core/sched/scheduler.py, Scheduler.schedule and
// update_from_output):
//   verify     a chunk of 1 + K tokens at the request's context: its linear
//              FLOPs, K + 1 logits rows and attention pairs (the cost model),
//              1 + K tokens of the step's token budget (vLLM's
//              max_num_batched_tokens, TensorRT-LLM's max_num_tokens)
//   emitted    1 + a tokens, a the drafts accepted (at most what is left of
//              the request's output); the KV keeps exactly those (rejected
//              drafts' slots are overwritten, vLLM rolls num_computed_tokens back)
//   room       a step needs room for 1 + K tokens of KV (SGLang's
//              check_decode_mem with its draft tokens, TensorRT-LLM's
//              getNeededBlocksOneStep)
//   draft      K passes of the draft (EAGLE's head of one decoder layer,
//              EagleProposer.propose; DeepSeek's MTP module of one layer): the
//              first over the step's tokens, the rest over its decodes, each
//              with an lm_head; its layer's KV is one more layer in the KV
//              cache (vLLM allocates the drafter's attention layers in the
//              same pool). ngram proposes on the CPU: no draft cost, no KV.
// The prefill step samples one token as without drafts.
//
// Acceptance: a is drawn per step and request from a distribution over
// 0..K, from --spec-acceptance R (each draft accepted with probability R
// when the one before it was: P(a >= i) = R^i), --spec-acceptance-length L
// (vLLM's "Mean acceptance length", 1 + accepted / drafts: the R whose mean
// is L), or --spec-acceptance-dist P0,...,PK. The draw hashes the request and
// its output so far with the seed, so it is the same in every engine and run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace kvreplay {

enum class SpecMethod : std::uint8_t { kNone, kEagle, kEagle3, kMtp, kNgram };
std::string_view to_string(SpecMethod method);

// DeepSeek-V3's MTP module: "the acceptance rate of the second token
// prediction ranges between 85% and 90%" (DeepSeek-V3 Technical Report,
// section 5.4.3); the low end is the default for --speculative mtp.
inline constexpr double kMtpAcceptance = 0.85;

struct SpecDecode {
  SpecMethod method = SpecMethod::kNone;
  std::uint32_t k = 0;  // drafts a step
  // P(a = i) for i = 0..k, and its running sum.
  std::vector<double> accepted, cumulative;
  std::uint64_t seed = 0;

  bool on() const { return k > 0; }
  // The draft's decoder layers (its KV and its cost): EAGLE's and MTP's one.
  std::uint32_t draft_layers() const {
    return method == SpecMethod::kNone || method == SpecMethod::kNgram ? 0 : 1;
  }
  // vLLM's mean acceptance length, 1 + E[a].
  double mean_length() const;
  // The drafts accepted at the decode step of the request keyed `request`
  // with `position` tokens of output so far.
  std::uint32_t draw(std::uint64_t request, std::uint64_t position) const;
};

// "METHOD:K" (eagle, eagle3, mtp or ngram; K from 1 to 16).
Result<SpecDecode, std::string> parse_speculative(std::string_view text);
// The acceptance, one of the three forms (exactly one given; mtp alone may
// give none). Errors name the option.
std::optional<std::string> set_acceptance(SpecDecode& spec, std::optional<double> rate,
                                          std::optional<double> mean_length,
                                          const std::vector<double>& dist);

}  // namespace kvreplay
