#include "core/error.h"

namespace kvreplay {

std::string_view to_string(CoreError error) {
  switch (error) {
    case CoreError::kPoolExhausted: return "pool exhausted";
    case CoreError::kBlockOutOfRange: return "block out of range";
    case CoreError::kBlockNotLive: return "block not live";
    case CoreError::kRefcountOverflow: return "refcount overflow";
    case CoreError::kInvalidConfig: return "invalid config";
    case CoreError::kOutputTooSmall: return "output too small";
    case CoreError::kPageOutOfRange: return "page out of range";
    case CoreError::kTargetNotEmpty: return "target not empty";
    case CoreError::kSizeMismatch: return "size mismatch";
    case CoreError::kLengthExceeded: return "length exceeded";
  }
  return "unknown error";
}

}  // namespace kvreplay
