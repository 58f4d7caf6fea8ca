// Result<T, E>: a value or an error, for operations that fail in normal use
// (pool exhausted, stale page, bad input). Exceptions are kept to the edges.
#pragma once

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

namespace kvreplay {

template <class E>
struct Unexpected {
  E error;
};

template <class E>
Unexpected(E) -> Unexpected<E>;

// Contract: exactly one of value() / error() is meaningful; calling the wrong
// one is a programmer error (assert).
template <class T, class E>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT
  Result(Unexpected<E> unexpected)                                       // NOLINT
      : state_(std::in_place_index<1>, std::move(unexpected.error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(state_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(state_));
  }
  const E& error() const {
    assert(!ok());
    return std::get<1>(state_);
  }

 private:
  std::variant<T, E> state_;
};

// Result of an operation with no value.
template <class E>
class [[nodiscard]] Result<void, E> {
 public:
  Result() = default;
  Result(Unexpected<E> unexpected) : error_(std::move(unexpected.error)), ok_(false) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const E& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  E error_{};
  bool ok_ = true;
};

}  // namespace kvreplay
