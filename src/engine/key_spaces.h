// The 64-bit spaces kvreplay keys prompt pages in, disjoint by construction:
//
//   [0, 2^62)            the trace's hash ids (every request reader refuses a
//                        larger one: kMaxTraceHashId in request.h)
//   [2^62, 2^63)         an engine's own chains: pages no trace hash names (a
//                        request's own, the prompt its samples share), one id
//                        from a counter per chain
//   [2^63, 2^63 + 2^62)  an engine's named-prefix chains, one id from a
//                        counter per prefix name
//   [2^63 + 2^62, 2^64)  the ids a disaggregated fleet's decode side keys a
//                        prompt by where the trace names none: from a counter,
//                        one per page (engine/fleet/fleet.cc)
//
// Each counter starts at its base and grows by one per chain, name or page,
// so no run can reach the next base (2^62 of them).
#pragma once

#include <cstdint>

#include "formats/requests/request.h"

namespace kvreplay {

inline constexpr std::uint64_t kOwnKeyBase = std::uint64_t{1} << 62;
inline constexpr std::uint64_t kPrefixKeyBase = std::uint64_t{1} << 63;
inline constexpr std::uint64_t kFleetKeyBase = kPrefixKeyBase + kOwnKeyBase;
static_assert(kMaxTraceHashId < kOwnKeyBase);

}  // namespace kvreplay
