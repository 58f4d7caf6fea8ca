#include "engine/token_runs.h"

#include <algorithm>

#include "engine/key_spaces.h"

namespace kvreplay {

TokenRuns known_prompt_runs(const Request& request,
                            const std::map<std::string, std::uint64_t>& prefix_ids) {
  TokenRuns prompt;
  if (!request.hash_ids.empty()) {
    const std::uint64_t block = std::max<std::uint32_t>(request.hash_block_tokens, 1);
    for (std::size_t k = 0; k < request.hash_ids.size() && k * block < request.prompt; ++k) {
      const auto end =
          static_cast<std::uint32_t>(std::min<std::uint64_t>((k + 1) * block, request.prompt));
      prompt.push_back(TokenRun{request.hash_ids[k], end});
    }
  } else if (!request.prefix.empty() && request.prefix_tokens > 0) {
    auto it = prefix_ids.find(request.prefix);
    if (it == prefix_ids.end()) return prompt;
    prompt.push_back(
        TokenRun{kPrefixKeyBase + it->second, std::min(request.prefix_tokens, request.prompt)});
  }
  return prompt;
}

TokenRuns named_prompt_runs(const Request& request,
                            std::map<std::string, std::uint64_t>& prefix_ids) {
  if (!request.prefix.empty()) prefix_ids.emplace(request.prefix, prefix_ids.size());
  return known_prompt_runs(request, prefix_ids);
}

}  // namespace kvreplay
