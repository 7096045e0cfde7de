// Distinct reasons with how many times each was given (why replay sites of this process stopped:
// lt_gemm.h, op_replay.h), for trident.explain. Thread-safe; keeps at most kMax reasons.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace trident::runtime {

class ReasonTally {
 public:
  static constexpr size_t kMax = 16;
  void add(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : items_)
      if (r.first == why) return void(++r.second);
    if (items_.size() < kMax) items_.emplace_back(why, 1);
  }
  std::vector<std::pair<std::string, int64_t>> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, int64_t>> items_;
};

}  // namespace trident::runtime
