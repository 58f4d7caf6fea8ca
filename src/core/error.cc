#include "core/error.h"

#include "core/enum_names.h"

namespace kvreplay {

namespace {

constexpr EnumName<CoreError> kCoreErrorNames[] = {
    {CoreError::kPoolExhausted, "pool exhausted"},
    {CoreError::kBlockOutOfRange, "block out of range"},
    {CoreError::kBlockNotLive, "block not live"},
    {CoreError::kRefcountOverflow, "refcount overflow"},
    {CoreError::kInvalidConfig, "invalid config"},
    {CoreError::kOutputTooSmall, "output too small"},
    {CoreError::kPageOutOfRange, "page out of range"},
    {CoreError::kTargetNotEmpty, "target not empty"},
    {CoreError::kSizeMismatch, "size mismatch"},
    {CoreError::kLengthExceeded, "length exceeded"},
};
static_assert(enum_names_unique(kCoreErrorNames));

}  // namespace

std::string_view to_string(CoreError error) {
  return enum_name(kCoreErrorNames, error, "unknown error");
}

}  // namespace kvreplay
