#include "engine/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "core/enum_names.h"

namespace kvreplay {

namespace {

constexpr EnumName<AllocatorKind> kAllocatorNames[] = {
    {AllocatorKind::kPaged, "paged"},
    {AllocatorKind::kContiguousMax, "contiguous-max"},
    {AllocatorKind::kContiguousPow2, "contiguous-pow2"},
    {AllocatorKind::kContiguousOracle, "contiguous-oracle"},
};
static_assert(enum_names_unique(kAllocatorNames));

constexpr EnumName<EngineKind> kEngineNames[] = {
    {EngineKind::kGeneric, "generic"},
    {EngineKind::kVllm, "vllm"},
};
static_assert(enum_names_unique(kEngineNames));

constexpr EnumName<GpuClass> kGpuClassNames[] = {
    {GpuClass::kLarge, "large"},
    {GpuClass::kSmall, "small"},
};
static_assert(enum_names_unique(kGpuClassNames));

constexpr EnumName<CostKind> kCostKindNames[] = {
    {CostKind::kAuto, "auto"},
    {CostKind::kRoofline, "roofline"},
    {CostKind::kLinear, "linear"},
};
static_assert(enum_names_unique(kCostKindNames));

}  // namespace

double LinearCost::step_ms_of(const StepWork& work, std::uint64_t bytes_per_token) const {
  return step_ms + static_cast<double>(work.prefill_tokens()) * prefill_token_ms +
         static_cast<double>(work.decode_requests()) * decode_seq_ms +
         work.context_read() * static_cast<double>(bytes_per_token) / (kv_bandwidth_gbps * 1e6);
}

std::string_view to_string(CostKind kind) {
  return enum_name(kCostKindNames, kind);
}

std::optional<CostKind> parse_cost_kind(std::string_view name) {
  return enum_parse(kCostKindNames, name);
}

std::string_view to_string(EngineKind kind) {
  return enum_name(kEngineNames, kind);
}

std::optional<EngineKind> parse_engine(std::string_view name) {
  return enum_parse(kEngineNames, name);
}

std::vector<std::string> engine_names() {
  return enum_names(kEngineNames);
}

std::string_view to_string(GpuClass gpu_class) {
  return enum_name(kGpuClassNames, gpu_class);
}

std::optional<GpuClass> parse_gpu_class(std::string_view name) {
  return enum_parse(kGpuClassNames, name);
}

std::vector<std::string> gpu_class_names() {
  return enum_names(kGpuClassNames);
}

BatchDefaults vllm_serve_batch_defaults(GpuClass gpu_class) {
  // EngineArgs.get_batch_defaults, OPENAI_API_SERVER column.
  switch (gpu_class) {
    case GpuClass::kLarge: return BatchDefaults{8192, 1024};
    case GpuClass::kSmall: return BatchDefaults{2048, 256};
  }
  return BatchDefaults{2048, 256};
}

std::string_view to_string(AllocatorKind kind) {
  return enum_name(kAllocatorNames, kind);
}

std::optional<AllocatorKind> parse_allocator(std::string_view name) {
  return enum_parse(kAllocatorNames, name);
}

std::vector<std::string> allocator_names() {
  return enum_names(kAllocatorNames);
}

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

constexpr std::uint64_t kPrefixChainBase = 1ull << 63;

}  // namespace

Simulator::Simulator(const RunConfig& config, const SimOptions& options)
    : config_(config),
      options_(options),
      pool_(config.kv.pool_blocks, config.alloc_order),
      cache_(options.evict, config.kv.pool_blocks, options.engine == EngineKind::kVllm,
             config.kv.page_tokens) {
  watermark_blocks_ = static_cast<std::uint32_t>(
      std::floor(options.watermark * static_cast<double>(config.kv.pool_blocks)));
  if (!paged()) free_ranges_[0] = std::uint64_t{config.kv.pool_blocks} * config.kv.page_tokens;
  if (vllm() || (paged() && config.alloc_order == AllocOrder::kVllm)) {
    // BlockPool.__init__ (vllm/v1/core/block_pool.py) takes block 0 off the
    // free queue as the null block: it never holds KV, and N - 1 blocks do.
    // The vllm engine always does; --alloc-order vllm does under generic too.
    auto null_block = pool_.allocate();
    if (null_block) null_block_ = null_block.value();
  }
  groups_ = options.kv_groups.empty() ? config.kv_groups : options.kv_groups;
  if (groups_.empty())
    groups_.push_back(KvCacheGroupSpec{KvCacheGroupSpec::kFull, 0, config.kv.layers});
  hybrid_ = groups_.size() > 1 || groups_[0].attention == KvCacheGroupSpec::kSliding;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    auto it = std::find_if(
        attention_types_.begin(), attention_types_.end(),
        [&](const std::vector<std::size_t>& ids) { return groups_[ids[0]].same_spec(groups_[g]); });
    if (it == attention_types_.end()) {
      attention_types_.push_back({g});
    } else {
      it->push_back(g);
    }
  }
  std::stable_partition(attention_types_.begin(), attention_types_.end(),
                        [&](const std::vector<std::size_t>& ids) {
                          return groups_[ids[0]].attention == KvCacheGroupSpec::kFull;
                        });
  hybrid_hits_.resize(groups_.size());
  if (auto error = sim_options_error(config, options)) {
    violation_ = Violation{0, 0, "config", *error};
    return;
  }
  if (options.cost.kind != CostKind::kLinear && config.model_spec) {
    const GpuSpec* gpu = cost_gpu(config);
    const double per_layer = static_cast<double>(config.kv.bytes_per_token()) /
                             std::max<std::uint32_t>(config.kv.layers, 1);
    if (gpu != nullptr) {
      auto made = Roofline::make(*config.model_spec, *gpu, config.tp, config.pp, per_layer,
                                 options.cost.roofline);
      if (made) roofline_ = std::move(made).value();
    }
  }
  work_ = StepWork(roofline_ ? roofline_->sliding_window() : 0);
}

const GpuSpec* cost_gpu(const RunConfig& config) {
  return find_gpu_preset(config.gpu.empty() ? kDefaultCostGpu : config.gpu);
}

std::optional<std::string> sim_options_error(const RunConfig& config, const SimOptions& options) {
  // The run's groups: the options' (tests), else the model's (RunConfig::kv_groups).
  const std::vector<KvCacheGroupSpec>& groups =
      options.kv_groups.empty() ? config.kv_groups : options.kv_groups;
  if (auto error = kv_groups_error(groups, config.kv.layers)) return error;
  const bool hybrid = groups.size() > 1 ||
                      (groups.size() == 1 && groups[0].attention == KvCacheGroupSpec::kSliding);
  if (config.kv.block_layers != 0 && config.kv.block_layers != kv_group_size(groups)) {
    return fmt::format("the pool's blocks hold {} layers, the KV-cache groups {}",
                       config.kv.block_layers, kv_group_size(groups));
  }
  if (hybrid &&
      (options.engine != EngineKind::kVllm || options.allocator != AllocatorKind::kPaged)) {
    return std::string(
        "hybrid KV-cache groups (several groups, or a sliding window) need the vllm engine "
        "and the paged allocator");
  }
  if (options.cost.kind == CostKind::kRoofline) {
    if (!config.model_spec) {
      return std::string(
          "--cost-model roofline needs the model's parameter count (--model or --model-config); "
          "give --cost-model linear for geometry set by hand");
    }
    if (cost_gpu(config) == nullptr) {
      return fmt::format("--cost-model roofline: unknown GPU '{}'", config.gpu);
    }
  }
  return std::nullopt;
}

Simulator::~Simulator() = default;

SequenceBlockTable Simulator::new_table() const {
  return SequenceBlockTable(config_.kv.pages_per_seq(), config_.kv.page_tokens);
}

std::vector<std::vector<std::vector<BlockId>>> Simulator::running_group_tables() const {
  std::vector<std::vector<std::vector<BlockId>>> out;
  for (const auto& flight : running_) {
    for (const Sample& sample : flight->samples) {
      if (sample.done) continue;
      auto& tables = out.emplace_back();
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        const SequenceBlockTable& table = group_table(sample, g);
        tables.emplace_back(table.entries().begin(), table.entries().end());
      }
    }
  }
  return out;
}

std::vector<std::vector<BlockId>> Simulator::running_block_tables() const {
  std::vector<std::vector<BlockId>> out;
  for (const auto& flight : running_) {
    for (const Sample& sample : flight->samples) {
      if (sample.done) continue;
      out.emplace_back(sample.table.entries().begin(), sample.table.entries().end());
    }
  }
  return out;
}

bool Simulator::idle() const {
  return arriving_.empty() && waiting_.empty() && running_.empty();
}

std::uint32_t Simulator::reservation_tokens(const Request& request) const {
  std::uint64_t final_length = std::uint64_t{request.prompt} + request.output - 1;
  switch (options_.allocator) {
    case AllocatorKind::kContiguousMax: return config_.kv.max_seq_tokens;
    case AllocatorKind::kContiguousPow2: {
      std::uint64_t pow2 = 1;
      while (pow2 < final_length) pow2 <<= 1;
      return static_cast<std::uint32_t>(std::min<std::uint64_t>(pow2, config_.kv.max_seq_tokens));
    }
    case AllocatorKind::kContiguousOracle:
    case AllocatorKind::kPaged: return static_cast<std::uint32_t>(final_length);
  }
  return static_cast<std::uint32_t>(final_length);
}

std::optional<SkipReason> Simulator::never_fits(const Request& request, std::uint64_t& need) const {
  const std::uint64_t pt = config_.kv.page_tokens;
  std::uint64_t final_length = std::uint64_t{request.prompt} + request.output - 1;
  if (final_length > config_.kv.max_seq_tokens) {
    need = final_length;
    return SkipReason::kTooLong;
  }
  // Admission keeps the running samples within max_seqs, so such a request
  // would wait at the head of the queue forever (and block everyone after it).
  if (request.n > options_.max_seqs) {
    need = request.n;
    return SkipReason::kTooManySamples;
  }
  if (!paged()) {
    need = std::uint64_t{request.n} * reservation_tokens(request);
    if (need <= std::uint64_t{config_.kv.pool_blocks} * pt) return std::nullopt;
    return SkipReason::kPoolTooSmall;
  }
  // Full prompt pages are shared by the samples; the rest is per sample.
  std::uint64_t shared = request.prompt / pt;
  need = shared + request.n * (ceil_div(final_length, pt) - shared);
  const std::uint64_t usable = usable_blocks();
  if (need + watermark_blocks_ <= usable) return std::nullopt;
  return SkipReason::kPoolTooSmall;
}

void Simulator::submit(Request request) {
  ++sim_.requests;
  std::uint64_t need = 0;
  if (auto reason = vllm() ? never_fits_vllm(request, need) : never_fits(request, need)) {
    ++sim_.skipped;
    if (*reason == SkipReason::kTooLong) ++sim_.skipped_too_long;
    if (*reason == SkipReason::kTooManySamples) ++sim_.skipped_too_many_samples;
    auto& first = first_skipped_[static_cast<std::size_t>(*reason)];
    if (!first) first = SkippedRequest{request.line, request.id, need};
    skip_request(request);
    return;
  }
  if (!any_arrival_) overload_.first_arrival = request.arrival;
  any_arrival_ = true;
  overload_.last_arrival = request.arrival;
  arriving_.push_back(std::move(request));
}

OverloadFigures Simulator::overload() const {
  OverloadFigures out = overload_;
  out.service_p99_s = latencies_.service_s.quantile(0.99);
  return out;
}

RequestTimes request_times(const Request& request) {
  RequestTimes times;
  times.line = request.line;
  times.id = request.id;
  times.prompt = request.prompt;
  times.output = request.output;
  times.n = request.n;
  times.arrival = request.arrival;
  return times;
}

void Simulator::skip_request(const Request& request) {
  if (!on_request) return;
  RequestTimes times = request_times(request);
  times.skipped = true;
  on_request(times);
}

std::shared_ptr<RequestTimes> Simulator::new_times(const Request& request) {
  return std::make_shared<RequestTimes>(request_times(request));
}

void Simulator::stamp_scheduled(Flight& flight) {
  flight.work_stamped = true;
  if (flight.times && flight.times->scheduled < 0) flight.times->scheduled = step_start_;
}

void Simulator::first_token(Flight& flight) {
  if (flight.times && flight.times->first_token < 0) {
    flight.times->first_token = 0;  // stamped in end_step
    step_first_tokens_.push_back(flight.times);
  }
}

void Simulator::request_done(Flight& flight) {
  if (flight.times) step_done_.push_back(flight.times);
}

std::optional<PageKey> Simulator::page_key(const Flight& flight, std::uint32_t page) const {
  const Request& request = flight.request;
  const std::uint64_t end = (std::uint64_t{page} + 1) * config_.kv.page_tokens;
  if (end > request.prompt) return std::nullopt;
  if (!request.hash_ids.empty()) {
    const std::uint64_t block = request.hash_block_tokens;
    const std::uint64_t k = (end - 1) / block;
    if (k >= request.hash_ids.size()) return std::nullopt;
    return PageKey{request.hash_ids[k], static_cast<std::uint32_t>(end - k * block)};
  }
  if (!request.prefix.empty() && end <= request.prefix_tokens) {
    return PageKey{kPrefixChainBase + prefix_ids_.at(request.prefix),
                   static_cast<std::uint32_t>(end)};
  }
  return std::nullopt;
}

bool Simulator::run_until(double horizon) {
  if (violation_) return false;  // sim_options_error, or an earlier failure
  for (;;) {
    const bool arrivals = !arriving_.empty() && arriving_.front().arrival <= now_;
    while (vllm() && !arriving_.empty() && arriving_.front().arrival <= now_) {
      enqueue_vllm(std::move(arriving_.front()));
      arriving_.pop_front();
    }
    while (!arriving_.empty() && arriving_.front().arrival <= now_) {
      auto flight = std::make_unique<Flight>();
      flight->request = std::move(arriving_.front());
      flight->times = new_times(flight->request);
      arriving_.pop_front();
      if (!flight->request.prefix.empty()) {
        prefix_ids_.emplace(flight->request.prefix, prefix_ids_.size());
      }
      waiting_.push_back(std::move(flight));
    }
    if (arrivals) {
      // Overwritten by every later arrival: in the end, the queue the last
      // request joined (children of one request counted once each).
      overload_.waiting_at_last_arrival = waiting_.size();
    }
    if (running_.empty() && waiting_.empty()) {
      if (arriving_.empty()) return true;
      now_ = std::max(now_, arriving_.front().arrival);
      continue;
    }
    if (now_ >= horizon) return true;
    if (!step()) return false;
  }
}

bool Simulator::step() {
  step_start_ = now_;
  work_.clear();
  if (vllm()) return step_vllm();
  ++tick_;
  std::uint32_t budget = options_.max_batched_tokens;
  for (std::size_t i = 0; i < running_.size();) {
    bool preempted_self = false;
    Flight& flight = *running_[i];
    if (!run_flight(flight, budget, i, preempted_self)) return false;
    if (preempted_self) break;
    bool done = std::all_of(flight.samples.begin(), flight.samples.end(),
                            [](const Sample& s) { return s.done; });
    if (done && flight.prefilled == flight.request.prompt) {
      ++sim_.finished;
      request_done(flight);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  bool stop = false;
  while (!waiting_.empty() && budget > 0 && !stop) {
    if (!admit_next(budget, stop)) return false;
  }
  sim_.max_running = std::max(sim_.max_running, running_samples_);
  return end_step();
}

bool Simulator::end_step() {
  double step_ms = 0;
  if (roofline_) {
    step_ms = roofline_->step_ms(work_);
  } else {
    step_ms = options_.cost.linear.step_ms_of(work_, config_.kv.bytes_per_token());
  }
  now_ += step_ms / 1000.0;
  last_first_tokens_ = step_first_tokens_.size();
  last_ttft_sum_ms_ = 0;
  for (auto& times : step_first_tokens_) {
    times->first_token = now_;
    last_ttft_sum_ms_ += times->ttft_ms();
  }
  step_first_tokens_.clear();
  for (auto& times : step_done_) {
    times->finished = now_;
    latencies_.queue_ms.add(times->queue_ms());
    latencies_.ttft_ms.add(times->ttft_ms());
    latencies_.e2e_ms.add(times->e2e_ms());
    latencies_.service_s.add((times->e2e_ms() - times->queue_ms()) / 1e3);
    const std::optional<double> tpot = times->tpot_ms();
    if (tpot) latencies_.tpot_ms.add(*tpot);
    const SloTargets& slo = options_.slo;
    if ((!slo.ttft_ms || times->ttft_ms() <= *slo.ttft_ms) &&
        (!slo.tpot_ms || !tpot || *tpot <= *slo.tpot_ms)) {
      ++slo_met_;
    }
    if (on_request) on_request(*times);
  }
  step_done_.clear();
  overload_.end = now_;
  overload_.peak_waiting = std::max<std::uint64_t>(overload_.peak_waiting, waiting_.size());
  ++sim_.steps;
  sim_.virtual_seconds = now_;
  record();
  bool due =
      options_.check.mode == CheckPolicy::Mode::kEvery ||
      (options_.check.mode == CheckPolicy::Mode::kEveryN && sim_.steps % options_.check.every == 0);
  if (due && !check_now()) return false;
  if (on_step) on_step(*this);
  return true;
}

bool Simulator::admit_next(std::uint32_t& budget, bool& stop) {
  Flight& flight = *waiting_.front();
  const Request& request = flight.request;
  const std::uint32_t pt = config_.kv.page_tokens;
  if (running_samples_ + request.n > options_.max_seqs) {
    stop = true;
    return true;
  }
  std::vector<BlockId>& hits = flight.hit_blocks;
  if (paged()) {
    if (options_.prefix_cache) {
      // Keep the hits of the last attempt that are still cached, then search on.
      verify_hits(flight);
      // At least one prompt token is always computed (it yields the first output).
      for (auto page = static_cast<std::uint32_t>(hits.size());
           (std::uint64_t{page} + 1) * pt < request.prompt; ++page) {
        auto key = page_key(flight, page);
        if (!key) break;
        auto block = cache_.find(*key);
        if (!block) break;
        add_hit(flight, *block);
      }
    }
    const auto hit_tokens = static_cast<std::uint32_t>(hits.size()) * pt;
    const std::uint32_t chunk = std::min(request.prompt - hit_tokens, budget);
    const std::uint64_t needed = ceil_div(std::uint64_t{hit_tokens} + chunk, pt) - hits.size();
    if (!room_beside_hits(flight, needed)) {
      stop = true;
      return true;
    }
  } else {
    const std::uint64_t slots = reservation_tokens(request);
    std::vector<std::uint64_t> regions;
    for (std::uint32_t k = 0; k < request.n; ++k) {
      auto region = reserve_region(slots);
      if (!region) break;
      regions.push_back(*region);
    }
    if (regions.size() < request.n) {
      std::uint64_t free_slots = std::uint64_t{config_.kv.pool_blocks} * pt - reserved_slots_;
      for (std::uint64_t start : regions) free_region(start, slots);
      if (free_slots >= slots * request.n) ++sim_.admission_blocked_external;
      stop = true;
      return true;
    }
    flight.samples.clear();
    for (std::uint64_t start : regions) {
      flight.samples.push_back(Sample{SequenceBlockTable(0, 1), 0, 0, false, start, slots, {}});
    }
  }

  std::unique_ptr<Flight> owned = std::move(waiting_.front());
  waiting_.pop_front();
  owned->order = next_order_++;
  running_samples_ += request.n;
  const auto hit_tokens = static_cast<std::uint32_t>(hits.size()) * pt;
  // A request starts over here, so the tokens it looks up are its prompt's.
  count_admission(request, request.prompt, hits.size(), hit_tokens, owned->admitted_before);
  owned->admitted_before = true;
  if (paged() && !install_hits(*owned, hits, hit_tokens)) return false;
  owned->prefilled = hit_tokens;
  owned->cached_pages = static_cast<std::uint32_t>(hits.size());
  forget_hits(*owned);
  running_.push_back(std::move(owned));
  Flight& admitted = *running_.back();
  bool preempted_self = false;
  if (!run_flight(admitted, budget, running_.size() - 1, preempted_self)) return false;
  if (preempted_self) {
    stop = true;
    return true;
  }
  bool done = std::all_of(admitted.samples.begin(), admitted.samples.end(),
                          [](const Sample& s) { return s.done; });
  if (done && admitted.prefilled == admitted.request.prompt) {
    ++sim_.finished;
    request_done(admitted);
    running_.pop_back();
  }
  return true;
}

bool Simulator::run_flight(Flight& flight, std::uint32_t& budget, std::size_t index,
                           bool& preempted_self) {
  const Request& request = flight.request;
  if (flight.prefilled < request.prompt) {
    const std::uint32_t chunk = std::min(request.prompt - flight.prefilled, budget);
    if (chunk == 0) return true;
    if (!append(flight, flight.samples[0], chunk, index, preempted_self)) return false;
    if (preempted_self) return true;
    budget -= chunk;
    schedule_work(flight, flight.prefilled, chunk, true);
    flight.prefilled += chunk;
    sim_.prompt_tokens_computed += chunk;
    if (paged() && options_.prefix_cache) {
      offer_to_cache(flight);
      if (violation_) return false;
    }
    if (flight.prefilled < request.prompt) return true;
    // The step that ends the prefill yields every sample's first token.
    for (std::uint32_t k = 1; k < request.n; ++k) {
      Sample child{new_table(), flight.samples[0].length, 0, false, 0, 0, {}};
      if (paged()) {
        if (auto forked = flight.samples[0].table.fork_into(child.table, pool_); !forked) {
          violation_ = Violation{
              sim_.steps + 1, request.line, "I1",
              fmt::format("request {}: fork_into failed: {}", request.id, forked.error())};
          return false;
        }
        ++totals_.forks;
        state_.logical_tokens += child.table.length();
        state_.table_entries += child.table.entries().size();
        request_entries_ += child.table.entries().size();
        count_layout(state_, child.table, +1);
        flight.samples.push_back(std::move(child));
      } else {
        // Contiguous baselines copy the prompt into each sample's own region.
        flight.samples[k].length = request.prompt;
        state_.logical_tokens += request.prompt;
      }
    }
    flight.counted.resize(request.n, 0);
    first_token(flight);
    for (std::size_t k = 0; k < flight.samples.size(); ++k) {
      flight.samples[k].generated = 1;
      count_output(flight, k);
    }
    for (Sample& sample : flight.samples) {
      if (sample.generated >= request.output) finish_sample(sample);
    }
    return true;
  }
  for (std::size_t k = 0; k < flight.samples.size(); ++k) {
    if (flight.samples[k].done) continue;
    if (budget == 0) break;
    if (!append(flight, flight.samples[k], 1, index, preempted_self)) return false;
    if (preempted_self) return true;
    Sample& sample = flight.samples[k];
    --budget;
    ++sample.generated;
    count_output(flight, k);
    schedule_work(flight, sample.length - 1, 1, false);
    if (sample.generated >= request.output) finish_sample(sample);
  }
  return true;
}

bool Simulator::append(Flight& flight, Sample& sample, std::uint32_t tokens, std::size_t index,
                       bool& preempted_self) {
  if (!paged()) {
    sample.length += tokens;  // inside its reserved region
    state_.logical_tokens += tokens;
    totals_.tokens_appended += tokens;
    return true;
  }
  for (;;) {
    auto needed = sample.table.blocks_needed(tokens, pool_);
    if (!needed) {
      violation_ = Violation{
          sim_.steps + 1, flight.request.line, "I1",
          fmt::format("request {}: append failed: {}", flight.request.id, needed.error())};
      return false;
    }
    while (pool_.free_count() < needed.value() && cache_.evict_one(pool_)) {
    }
    if (pool_.free_count() >= needed.value()) break;
    // Out of blocks: preempt the most recently admitted request, maybe this one.
    const bool self = index + 1 == running_.size();
    preempt_last();
    if (self) {
      preempted_self = true;
      return true;
    }
  }
  std::size_t pages_before = sample.table.entries().size();
  count_layout(state_, sample.table, -1);
  auto appended = sample.table.append(tokens, pool_);
  count_layout(state_, sample.table, +1);
  if (!appended) {
    violation_ = Violation{
        sim_.steps + 1, flight.request.line, "I1",
        fmt::format("request {}: append failed: {}", flight.request.id, appended.error())};
    return false;
  }
  for (const CopyOnWrite& copy : appended.value().copies) {
    ++totals_.cow_copies;
    totals_.cow_bytes += std::uint64_t{pool_.filled(copy.source)} * config_.kv.bytes_per_token();
  }
  sample.length += tokens;
  totals_.tokens_appended += tokens;
  state_.logical_tokens += tokens;
  state_.table_entries += sample.table.entries().size() - pages_before;
  request_entries_ += sample.table.entries().size() - pages_before;
  return true;
}

void Simulator::count_admission(const Request& request, std::uint32_t num_tokens,
                                std::size_t hit_blocks, std::uint32_t hit_tokens,
                                bool readmission) {
  if (paged() && options_.prefix_cache) {
    // KVCacheManager.record_prefix_cache_stats: num_tokens and hits, a
    // preempted request's apart (PrefixCacheStats).
    (readmission ? sim_.preempted_queries : sim_.queries) += num_tokens;
    (readmission ? sim_.preempted_hits : sim_.hits) += hit_tokens;
  }
  if (readmission) return;
  // The hit rates count each request once: never its recomputation.
  sim_.query_tokens += request.prompt;
  sim_.hit_tokens += hit_tokens;
  sim_.hit_blocks += hit_blocks;
  sim_.hit_rate_sum += static_cast<double>(hit_tokens) / static_cast<double>(request.prompt);
  ++sim_.hit_rate_requests;
}

void Simulator::verify_hits(Flight& flight) {
  std::vector<BlockId>& hits = flight.hit_blocks;
  std::size_t valid = hits.size();
  std::optional<std::span<const BlockId>> evicted;
  if (flight.track_id != 0 && flight.track_id == tracked_)
    evicted = cache_.evicted_since(tracked_mark_);
  if (evicted) {
    for (BlockId b : *evicted) {
      if (b >= hit_slots_.size()) continue;
      const HitSlot& slot = hit_slots_[b];
      if (slot.owner == tracked_ && slot.pos < valid && hits[slot.pos] == b) valid = slot.pos;
    }
    for (std::size_t i = valid; i < hits.size(); ++i) cache_.unwatch(hits[i]);
  } else {
    // This flight becomes the tracked one: its hits, and only they, watched
    // (once track_hits runs).
    cache_.unwatch_all();
    valid = 0;
    while (valid < hits.size() &&
           cache_.cached_as(hits[valid], hit_key(flight, static_cast<std::uint32_t>(valid)))) {
      ++valid;
    }
    flight.track_id = tracked_ = ++last_track_id_;  // never reused
  }
  // A flight verified again is one whose last attempt failed: track_hits ran.
  assert(!evicted || flight.watched_hits == hits.size());
  hits.resize(valid);
  flight.watched_hits = evicted ? static_cast<std::uint32_t>(valid) : 0;
  tracked_mark_ = cache_.evictions();
}

void Simulator::track_hits(Flight& flight) {
  // verify_hits made this flight the tracked one, and no block was evicted since.
  assert(flight.track_id == tracked_ && tracked_mark_ == cache_.evictions());
  const std::vector<BlockId>& hits = flight.hit_blocks;
  for (std::size_t i = flight.watched_hits; i < hits.size(); ++i) track_hit(hits[i], i);
  flight.watched_hits = static_cast<std::uint32_t>(hits.size());
}

void Simulator::forget_hits(Flight& flight) {
  flight.hit_blocks.clear();
  flight.watched_hits = 0;
  if (flight.track_id == tracked_) {
    cache_.unwatch_all();
    tracked_ = 0;  // the next verification is hit by hit
  }
}

bool Simulator::room_beside_hits(Flight& flight, std::uint64_t needed) {
  // Free blocks and evictable cached ones, less the hits that are evictable
  // (touching them takes them off the free queue). The hits are counted only
  // when the bounds leave the answer open.
  const std::vector<BlockId>& hits = flight.hit_blocks;
  const std::uint64_t available = pool_.free_count() + cache_.evictable();
  const std::uint64_t wanted = needed + watermark_blocks_;
  if (available >= wanted + hits.size()) return true;  // admitted: its hits need no tracking
  // The flight waits, or may: its hits tracked from now on.
  track_hits(flight);
  if (available < wanted) return false;
  // The hits are the tracked flight's, watched in the cache: those that are
  // evictable (held by the cache alone) are counted as they change.
  const std::uint64_t evictable_hits = cache_.watched_evictable();
  // Recounted under --check every (and always in debug builds, which assert).
#ifdef NDEBUG
  const bool recount_now = options_.check.mode == CheckPolicy::Mode::kEvery;
#else
  const bool recount_now = true;
#endif
  if (recount_now) {
    std::uint64_t recount = 0;
    for (BlockId b : hits) recount += pool_.refcount(b) == 1 ? 1 : 0;
    assert(recount == evictable_hits);
    if (recount != evictable_hits && !violation_) {
      violation_ = Violation{sim_.steps + 1, 0, "I1",
                             fmt::format("a waiting request's evictable hits counted {}, "
                                         "recounted {}",
                                         evictable_hits, recount)};
    }
  }
  return available - evictable_hits >= wanted;
}

void Simulator::track_hit(BlockId block, std::size_t pos) {
  if (block >= hit_slots_.size()) hit_slots_.resize(std::size_t{block} + 1);
  hit_slots_[block] = HitSlot{tracked_, static_cast<std::uint32_t>(pos)};
  cache_.watch(block);
}

bool Simulator::install_hits(Flight& flight, const std::vector<BlockId>& hits,
                             std::uint32_t hit_tokens) {
  flight.samples.clear();
  flight.samples.push_back(Sample{new_table(), hit_tokens, 0, false, 0, 0, {}});
  if (hits.empty()) return true;
  // Hit blocks leave the eviction candidates (BlockPool.touch) before any allocation.
  cache_.touch_all(hits, tick_);
  SequenceBlockTable& table = flight.samples[0].table;
  if (auto installed = table.install_shared_prefix(hits, hit_tokens, pool_); !installed) {
    violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                           fmt::format("request {}: install_shared_prefix failed: {}",
                                       flight.request.id, installed.error())};
    return false;
  }
  ++totals_.prefix_installs;
  totals_.shared_pages_installed += hits.size();
  state_.logical_tokens += hit_tokens;
  state_.table_entries += hits.size();
  request_entries_ += hits.size();
  count_layout(state_, table, +1);
  return true;
}

void Simulator::release_sample(Sample& sample) {
  state_.logical_tokens -= sample.length;
  sample.length = 0;
  if (!paged()) {
    free_region(sample.region, sample.region_slots);
    return;
  }
  // KVCacheCoordinator.free: group by group, in group order.
  for (std::size_t g = 0; g < 1 + sample.more.size(); ++g) {
    SequenceBlockTable& table = group_table(sample, g);
    count_layout(state_, table, -1);
    // The released entries, handed over rather than copied.
    std::vector<BlockId>& blocks = release_scratch_;
    blocks.clear();
    (void)table.release_all(pool_, blocks);  // tables built by this simulator are consistent
    // Pages on the null block (skipped by a sliding window) were uncounted
    // then; only a hybrid run's tables hold it.
    const auto skipped = static_cast<std::size_t>(
        hybrid_ ? std::count(blocks.begin(), blocks.end(), *null_block_) : 0);
    state_.table_entries -= blocks.size() - skipped;
    request_entries_ -= blocks.size() - skipped;
    // Last page first: a sequence's tail is evicted before its shared prefix.
    cache_.released_last_first(blocks, pool_, tick_);
  }
}

void Simulator::count_output(Flight& flight, std::size_t sample) {
  // A preempted request starts over and produces its first tokens again:
  // recomputation, not output.
  if (flight.samples[sample].generated > flight.counted[sample]) {
    flight.counted[sample] = flight.samples[sample].generated;
    ++sim_.output_tokens;
  }
}

void Simulator::finish_sample(Sample& sample) {
  release_sample(sample);
  sample.done = true;
  --running_samples_;
}

void Simulator::preempt_last() {
  std::unique_ptr<Flight> victim = std::move(running_.back());
  running_.pop_back();
  if (victim->times) ++victim->times->preemptions;
  for (Sample& sample : victim->samples) {
    if (sample.done) continue;
    release_sample(sample);
    --running_samples_;
  }
  // Recompute: the request starts over (prefill, then its first token again).
  victim->samples.clear();
  victim->prefilled = 0;
  victim->cached_pages = 0;
  waiting_.push_front(std::move(victim));
  ++sim_.preemptions;
}

void Simulator::offer_to_cache(Flight& flight) {
  const std::uint32_t full_pages =
      std::min(flight.prefilled, flight.request.prompt) / config_.kv.page_tokens;
  for (std::uint32_t page = flight.cached_pages; page < full_pages; ++page) {
    auto key = page_key(flight, page);
    if (!key) break;
    auto block = flight.samples[0].table.get(page);
    if (!block) break;
    auto inserted = cache_.insert(*key, *block, pool_, tick_);
    if (!inserted) {
      violation_ = Violation{sim_.steps + 1, flight.request.line, "I1",
                             fmt::format("request {}: caching page {} failed: {}",
                                         flight.request.id, page, inserted.error())};
      return;
    }
    state_.table_entries += inserted.value() ? 1 : 0;
  }
  flight.cached_pages = std::max(flight.cached_pages, full_pages);
}

void Simulator::record_in_use(std::uint32_t in_use, std::uint32_t resident) {
  sim_.in_use_sum += in_use;
  sim_.peak_cache_resident = std::max(sim_.peak_cache_resident, resident);
  if (sim_.steps > 1 && in_use <= sim_.peak_in_use) return;
  sim_.peak_in_use = in_use;
  const std::uint64_t referenced = std::min<std::uint64_t>(request_entries_, usable_blocks());
  sim_.saved_blocks_at_peak = referenced > in_use ? referenced - in_use : 0;
}

void Simulator::record_saved_blocks() {
  // The report's sharing.saved_blocks_at_peak (and the summary's) is this
  // simulator's figure, taken at the in-use peak; replay's definition counts
  // cache entries as table entries, which a prefix cache makes exceed the pool.
  totals_.saved_blocks_at_peak = paged() ? static_cast<std::int64_t>(sim_.saved_blocks_at_peak) : 0;
}

void Simulator::record() {
  state_.live_sequences = running_samples_;
  const std::uint32_t pt = config_.kv.page_tokens;
  if (paged()) {
    // The null block (filled 0) is neither used nor wasted: used_blocks.
    record_event(state_, totals_, used_blocks(), pool_.filled_total(), pt);
    record_in_use(in_use_blocks(), cache_resident_blocks());
    record_saved_blocks();
    return;
  }
  // Contiguous: reserved regions, in units of pages, against the KV they hold.
  sim_.reserved_slots_peak = std::max(sim_.reserved_slots_peak, reserved_slots_);
  const auto used = static_cast<std::uint32_t>(ceil_div(reserved_slots_, pt));
  std::uint64_t physical = state_.logical_tokens;
  record_event(state_, totals_, used, std::min<std::uint64_t>(physical, std::uint64_t{used} * pt),
               pt);
  record_in_use(used, 0);
  record_saved_blocks();
}

bool Simulator::check_now() {
  if (!paged()) return true;
  table_refs_.clear();
  holds_.clear();
  std::deque<std::string> labels;
  for (const auto& flight : running_) {
    for (std::size_t k = 0; k < flight->samples.size(); ++k) {
      if (flight->samples[k].done) continue;
      labels.push_back(fmt::format("request {} sample {}", flight->request.id, k));
      table_refs_.push_back({&flight->samples[k].table, labels.back(),
                             hybrid_ ? null_block_.value_or(kInvalidBlock) : kInvalidBlock});
      // Every KV-cache group's table: pages skipped by a window hold the null block.
      for (std::size_t g = 1; g <= flight->samples[k].more.size(); ++g) {
        labels.push_back(fmt::format("request {} group {}", flight->request.id, g));
        table_refs_.push_back(
            {&flight->samples[k].more[g - 1], labels.back(), null_block_.value_or(kInvalidBlock)});
      }
    }
  }
  cache_.holds(holds_);
  if (null_block_) holds_.push_back(*null_block_);
  ++totals_.checks;
  auto found = checker_.check(pool_, config_.kv.page_tokens, table_refs_, holds_);
  if (!found) return true;
  violation_ = Violation{sim_.steps, 0, found->invariant, found->message};
  return false;
}

bool Simulator::finish() {
  if (options_.check.mode == CheckPolicy::Mode::kOff) return true;
  return check_now();
}

std::optional<std::uint64_t> Simulator::reserve_region(std::uint64_t slots) {
  for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
    if (it->second < slots) continue;
    std::uint64_t start = it->first;
    std::uint64_t rest = it->second - slots;
    free_ranges_.erase(it);
    if (rest > 0) free_ranges_.emplace(start + slots, rest);
    reserved_slots_ += slots;
    return start;
  }
  return std::nullopt;
}

void Simulator::free_region(std::uint64_t start, std::uint64_t slots) {
  reserved_slots_ -= slots;
  auto [it, inserted] = free_ranges_.emplace(start, slots);
  (void)inserted;
  // Coalesce with the neighbours.
  if (auto next = std::next(it); next != free_ranges_.end() && start + it->second == next->first) {
    it->second += next->second;
    free_ranges_.erase(next);
  }
  if (it != free_ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_ranges_.erase(it);
    }
  }
}

}  // namespace kvreplay
