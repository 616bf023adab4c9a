#include "step/graph_bindings.h"

#include <fmt/format.h>

namespace bigbatch::train_detail {

GraphBindings::GraphBindings(const Named& tensors) {
  bound_.reserve(tensors.size());
  for (const auto& [name, t] : tensors) bound_.push_back(bind(name, t));
}

GraphBindings::Binding GraphBindings::bind(const std::string& name, const torch::Tensor& t) {
  Binding b;
  b.name = name;
  b.defined = t.defined();
  if (b.defined) {
    b.data = t.data_ptr();
    b.sizes = t.sizes().vec();
    b.type = t.scalar_type();
  }
  return b;
}

std::string GraphBindings::changed(const Named& now) const {
  if (now.size() != bound_.size()) {
    return fmt::format("{} tensor(s) were captured, {} are bound now", bound_.size(), now.size());
  }
  // Compared in place, without copies: this runs before every replay.
  for (size_t i = 0; i < now.size(); ++i) {
    const Binding& was = bound_[i];
    const std::string& name = now[i].first;
    const torch::Tensor& t = now[i].second;
    if (name != was.name) return fmt::format("tensor {} is {} now, captured as {}", i, name, was.name);
    if (t.defined() != was.defined) {
      return fmt::format("{} is {} now", name, t.defined() ? "defined" : "undefined");
    }
    if (!t.defined()) continue;
    if (t.data_ptr() != was.data) return fmt::format("the storage of {} moved", name);
    if (t.sizes() != c10::IntArrayRef(was.sizes) || t.scalar_type() != was.type) {
      return fmt::format("{} changed shape or type", name);
    }
  }
  return "";
}

}  // namespace bigbatch::train_detail
