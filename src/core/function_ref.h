// A non-owning reference to a callable (like C++26's std::function_ref): passing a lambda costs
// two pointers and never allocates, where std::function allocates for captures over 16 bytes.
// The callable must outlive the FunctionRef; a synchronous call taking one as a parameter is
// the intended use.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace gemmaserve {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  // Implicit, so a lambda argument converts as it would to std::function.
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                        std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor)
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace gemmaserve
