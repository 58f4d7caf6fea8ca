// The HTML report's style sheet and script: report/assets/report.css and
// report/assets/report.js, embedded byte for byte at build time by
// cmake/embed_asset.cmake (edit the asset files, not generated code).
#pragma once

#include <string_view>

namespace kvreplay::assets {

std::string_view report_css();
std::string_view report_js();

}  // namespace kvreplay::assets
