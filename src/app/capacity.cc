// kvreplay capacity: the KV capacity an engine would allocate at startup for a
// deployment (model/capacity.h), printed the way the engine logs it, and
// --report as JSON.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <string>

#include "app/command.h"
#include "app/exit_codes.h"
#include "core/config.h"
#include "io/output.h"
#include "io/standard_output.h"
#include "model/capacity.h"
#include "model/gpu.h"
#include "model/model_config.h"
#include "model/presets.h"
#include "model/rank_weights.h"

namespace kvreplay {

namespace {

double gib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

nlohmann::json capacity_json(const CapacityFigures& f, const CapacityRequest& r,
                             const std::string& model, const RankWeights& weights) {
  nlohmann::json out;
  out["kvreplay_capacity"] = 1;
  out["engine"] = std::string(to_string(f.engine));
  out["engine_version"] = f.version;
  out["deployment"] = {{"model", model},
                       {"gpu", r.gpu_name},
                       {"gpu_total_bytes", r.total_bytes},
                       {"tp", r.tp},
                       {"pp", r.pp},
                       {"max_model_len", f.max_model_len},
                       {"kv_cache_dtype", std::string(to_string(r.kv_dtype))},
                       {"page_tokens", f.page_tokens},
                       {"enforce_eager", r.enforce_eager}};
  if (f.max_num_seqs != 0) out["deployment"]["max_num_seqs"] = f.max_num_seqs;
  if (f.max_num_batched_tokens != 0) {
    out["deployment"]["max_num_batched_tokens"] = f.max_num_batched_tokens;
  }
  out["deployment"][f.fraction_name] = f.fraction;
  out["memory"] = {{"total_bytes_per_gpu", f.total_bytes},
                   {"budget_bytes_per_gpu", f.budget_bytes},
                   {"weights_bytes_per_gpu", f.weights_bytes},
                   {"activation_bytes_per_gpu", f.activation_bytes},
                   {"cuda_graph_bytes_per_gpu", f.cuda_graph_bytes},
                   {"non_torch_bytes_per_gpu", f.non_torch_bytes},
                   {"deciding_stage", f.deciding_stage}};
  out["weights"] = {{"embedding_bytes", weights.embedding}, {"lm_head_bytes", weights.lm_head},
                    {"attention_bytes", weights.attention}, {"mlp_bytes", weights.mlp},
                    {"experts_bytes", weights.experts},     {"norm_bytes", weights.norms},
                    {"buffer_bytes", weights.buffers}};
  out["kv_cache"] = {{"tokens", f.tokens},
                     {"blocks", f.blocks},
                     {"bytes_per_gpu", f.kv_bytes},
                     {"bytes_per_token", f.bytes_per_token}};
  out["max_concurrency"] = std::round(f.max_concurrency * 100.0) / 100.0;
  out["log_lines"] = f.log_lines;
  out["rules"] = f.rules;
  return out;
}

std::string text_summary(const CapacityFigures& f, const CapacityRequest& r,
                         const std::string& model) {
  std::string out =
      fmt::format("{} {} on {} x {} (tp {}, pp {}), {}, {} {}{}\n", to_string(f.engine), f.version,
                  r.tp * r.pp, r.gpu_name, r.tp, r.pp, model, f.fraction_name, f.fraction,
                  f.fraction_default ? " (default)" : "");
  out += fmt::format("memory per GPU{}:\n",
                     r.pp > 1 ? fmt::format(" (stage {}, the one that decides)", f.deciding_stage)
                              : std::string());
  auto row = [&](std::string_view what, std::uint64_t bytes) {
    out += fmt::format("  {:<36} {:>9.2f} GiB\n", what, gib(bytes));
  };
  // Each engine's own arithmetic, top to bottom.
  row("total (as CUDA reports it)", f.total_bytes);
  switch (f.engine) {
    case CapacityEngine::kVllm:
      row(fmt::format("budget ({} x total)", f.fraction), f.budget_bytes);
      row("- weights", f.weights_bytes);
      row("- activation peak (profile run)", f.activation_bytes);
      row("- CUDA graphs (estimate)", f.cuda_graph_bytes);
      row("- non-torch memory", f.non_torch_bytes);
      break;
    case CapacityEngine::kSglang:
      row("- CUDA context and NCCL", f.non_torch_bytes);
      row("= free before the weights", f.total_bytes - f.non_torch_bytes);
      row(fmt::format("static budget ({} x free)", f.fraction), f.budget_bytes);
      row("- weights", f.weights_bytes);
      break;
    case CapacityEngine::kTrtllm:
      row("- weights", f.weights_bytes);
      row("- activations (profile run)", f.activation_bytes);
      row("- outside torch (CUDA graphs, NCCL)", f.non_torch_bytes);
      row("= free at the profile's peak", f.budget_bytes);
      break;
  }
  row(f.engine == CapacityEngine::kTrtllm ? fmt::format("= KV cache ({} x free)", f.fraction)
                                          : std::string("= KV cache"),
      f.kv_bytes);
  out += fmt::format("KV cache: {} tokens, {} blocks of {} tokens, {} bytes a token a GPU\n",
                     f.tokens, f.blocks, f.page_tokens, f.bytes_per_token);
  out += "as the engine logs it:\n";
  for (const std::string& line : f.log_lines) out += "  " + line + "\n";
  return out;
}

class CapacityCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("--engine", engine_, "vllm, sglang or trtllm (default vllm)")
        ->check(CLI::IsMember({"vllm", "sglang", "trtllm"}));
    app.add_option("--engine-version", version_,
                   "the engine's version whose rules apply (default the newest modelled: "
                   "vllm 0.21, sglang 0.5.4, trtllm 1.0)");
    app.add_option("--model", model_, "a model preset (" + model_preset_list() + ")");
    app.add_option("--model-config", model_config_, "the model's Hugging Face config.json");
    app.add_option("--gpu", gpu_, "a GPU preset (" + gpu_preset_list() + ")");
    app.add_option("--gpu-memory", gpu_memory_,
                   "a GPU without a preset: its total memory as CUDA reports it "
                   "(torch.cuda.mem_get_info, e.g. 23.6GiB for an RTX 4090)");
    app.add_option("--tp", tp_, "tensor-parallel size (default 1)")->check(CLI::Range(1u, 1024u));
    app.add_option("--pp", pp_, "pipeline-parallel size (default 1)")->check(CLI::Range(1u, 1024u));
    app.add_option("--max-model-len", max_model_len_,
                   "the longest request (default the model's max_position_embeddings)")
        ->check(CLI::Range(1u, 1u << 30));
    app.add_option("--kv-cache-dtype", kv_dtype_, "auto (the model's) or fp8")
        ->check(CLI::IsMember({"auto", "fp8"}));
    app.add_option("--page-tokens", page_tokens_,
                   "tokens a KV block (default the engine's: vllm 16, sglang 1, trtllm 32)")
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("--max-num-seqs", max_num_seqs_,
                   "the batch's most sequences (default the engine's for the GPU)")
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("--max-num-batched-tokens", max_batched_,
                   "the batch's most tokens (vllm; sglang's chunked_prefill_size; trtllm's "
                   "max_num_tokens)")
        ->check(CLI::Range(1u, 1u << 24));
    app.add_flag("--enforce-eager", eager_, "no CUDA graphs");
    app.add_option("--gpu-memory-utilization", vllm_fraction_,
                   "vLLM's knob (default 0.92 from 0.21, 0.9 before)");
    app.add_option("--mem-fraction-static", sglang_fraction_,
                   "SGLang's knob (default as SGLang chooses it for the GPU and TP)");
    app.add_option("--free-gpu-memory-fraction", trtllm_fraction_,
                   "TensorRT-LLM's knob (default 0.9)");
    app.add_option("--report", report_, "write the figures as JSON (- for stdout)");
    app.footer(
        "Examples:\n"
        "  kvreplay capacity --model llama-3.1-8b --gpu h100-80gb\n"
        "  kvreplay capacity --engine sglang --model qwen3-235b-a22b --gpu h200 --tp 8\n"
        "  kvreplay capacity --engine trtllm --model llama-3.1-8b-fp8 --gpu-memory 23.6GiB "
        "--report -");
  }

  int run() override {
    auto fail = [](const std::string& message) {
      eprint("command line: {}\n", message);
      return kExitInput;
    };
    CapacityRequest request;
    // --engine's choices are the table's names (CLI11 checked them).
    request.engine = parse_capacity_engine(engine_).value_or(CapacityEngine::kVllm);
    // Each engine's knob under its own name only.
    struct Knob {
      const char* flag;
      const std::optional<double>& value;
      CapacityEngine engine;
    };
    const Knob knobs[] = {
        {"--gpu-memory-utilization", vllm_fraction_, CapacityEngine::kVllm},
        {"--mem-fraction-static", sglang_fraction_, CapacityEngine::kSglang},
        {"--free-gpu-memory-fraction", trtllm_fraction_, CapacityEngine::kTrtllm}};
    for (const Knob& knob : knobs) {
      if (!knob.value) continue;
      if (knob.engine != request.engine) {
        return fail(fmt::format("{} is {}'s knob, not {}'s", knob.flag, to_string(knob.engine),
                                to_string(request.engine)));
      }
      if (!(*knob.value > 0.0 && *knob.value <= 1.0)) {
        return fail(fmt::format("{} {}: must be in (0, 1]", knob.flag, *knob.value));
      }
      request.fraction = *knob.value;
    }
    if (auto problem = capacity_version_error(request.engine, version_)) {
      return fail("--engine-version: " + *problem);
    }
    request.version = version_;

    // The model.
    if (model_.empty() == model_config_.empty()) {
      return fail("give one of --model or --model-config");
    }
    ModelSpec spec;
    std::string model_name;
    if (!model_config_.empty()) {
      auto loaded = load_model_config(model_config_);
      if (!loaded) {
        eprint("{}\n", loaded.error().to_string());
        return kExitInput;
      }
      spec = std::move(loaded).value();
      model_name = model_config_;
    } else {
      const ModelPreset* preset = find_model_preset(model_);
      if (preset == nullptr) {
        return fail(
            fmt::format("--model: unknown model '{}' (known: {})", model_, model_preset_list()));
      }
      spec = preset->spec;
      model_name = preset->name;
    }
    request.model = &spec;

    // The GPU.
    if (gpu_.empty() == gpu_memory_.empty()) return fail("give one of --gpu or --gpu-memory");
    if (!gpu_.empty()) {
      const GpuSpec* gpu = find_gpu_preset(gpu_);
      if (gpu == nullptr) {
        return fail(
            fmt::format("--gpu: unknown GPU '{}' (known: {}; give --gpu-memory for "
                        "another)",
                        gpu_, gpu_preset_list()));
      }
      set_capacity_gpu(request, *gpu);
    } else {
      auto bytes = parse_memory_size(gpu_memory_);
      if (!bytes) return fail("--gpu-memory: " + bytes.error());
      if (bytes.value() < (256ull << 20) || bytes.value() > (16ull << 40)) {
        return fail(
            fmt::format("--gpu-memory {}: a GPU has between 256 MiB and 16 TiB", gpu_memory_));
      }
      request.gpu_name = fmt::format("GPU of {:.2f} GiB", gib(bytes.value()));
      request.total_bytes = bytes.value();
    }
    request.tp = tp_;
    request.pp = pp_;
    request.max_model_len = max_model_len_;
    request.kv_dtype = kv_dtype_ == "fp8" ? Dtype::kFp8 : spec.kv_dtype;
    request.page_tokens = page_tokens_;
    request.max_num_seqs = max_num_seqs_;
    request.max_num_batched_tokens = max_batched_;
    request.enforce_eager = eager_;

    OutputSet outputs;
    if (!model_config_.empty()) outputs.add_input("--model-config", model_config_);
    OutputFile* report_out = nullptr;
    if (!report_.empty() &&
        (report_out = outputs.open("the report", report_, OutputFile::Flow::kWhole, "--report")) ==
            nullptr) {
      eprint("{}\n", outputs.error());
      return kExitInput;
    }

    auto figures = compute_capacity(request);
    if (!figures) {
      outputs.abandon();
      return fail(figures.error());
    }
    const CapacityFigures& f = figures.value();
    const RankWeights weights = rank_weights(spec, request.tp, request.pp, f.deciding_stage);
    std::FILE* text = outputs.writes_stdout() ? stderr : stdout;
    if (report_out != nullptr) {
      report_out->write(capacity_json(f, request, model_name, weights).dump(2) + "\n");
    }
    if (!outputs.commit()) {
      eprint("{}\n", outputs.error());
      return kExitInput;
    }
    put_text(text, text_summary(f, request, model_name));
    return kExitOk;
  }

 private:
  std::string engine_ = "vllm";
  std::string version_;
  std::string model_, model_config_;
  std::string gpu_, gpu_memory_;
  std::uint32_t tp_ = 1, pp_ = 1;
  std::uint32_t max_model_len_ = 0;
  std::string kv_dtype_ = "auto";
  std::uint32_t page_tokens_ = 0;
  std::uint32_t max_num_seqs_ = 0;
  std::uint32_t max_batched_ = 0;
  bool eager_ = false;
  std::optional<double> vllm_fraction_, sglang_fraction_, trtllm_fraction_;
  std::string report_;
};

}  // namespace

std::unique_ptr<Command> make_capacity_command() {
  return std::make_unique<CapacityCommand>();
}

}  // namespace kvreplay
