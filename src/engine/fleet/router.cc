#include "engine/fleet/router.h"

#include <algorithm>

#include "core/enum_names.h"
#include "engine/fleet/router_policies.h"

namespace kvreplay {

namespace {

constexpr EnumName<RouterView> kViewNames[] = {
    {RouterView::kPrecise, "precise"},
    {RouterView::kApproximate, "approximate"},
};
static_assert(enum_names_unique(kViewNames));

}  // namespace

std::string_view to_string(RouterView view) {
  return enum_name(kViewNames, view);
}
std::optional<RouterView> parse_router_view(std::string_view name) {
  return enum_parse(kViewNames, name);
}
std::vector<std::string> router_view_names() {
  return enum_names(kViewNames);
}

Router::Router(const RouterOptions& options, std::uint32_t instances, std::uint32_t page_tokens,
               std::uint64_t pool_tokens)
    : options_(options),
      policy_(
          make_routing_policy(RouterSetup{options_, std::max<std::uint32_t>(instances, 1),
                                          std::max<std::uint32_t>(page_tokens, 1), pool_tokens})) {}

Router::~Router() = default;
Router::Router(Router&&) noexcept = default;
Router& Router::operator=(Router&&) noexcept = default;

bool Router::needs_precise_overlap() const {
  return policy_->needs_precise_overlap();
}

RouteChoice Router::route(const Request& request, double now, std::span<InstanceView> views) {
  return policy_->pick(request, now, views);
}

void Router::prefill_done(std::uint32_t instance, std::uint64_t tag) {
  policy_->prefill_done(instance, tag);
}

void Router::finished(std::uint32_t instance, std::uint64_t tag) {
  policy_->finished(instance, tag);
}

}  // namespace kvreplay
