#include "validate/calibrate/sweeper.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace osdp::validate {

double Sweeper::batch(Stream& s, const Op& op, int iters) {
  comm_.barrier("calibrate");
  const auto gate = dev_.hold(s);
  const EventPtr e0 = s.record();
  s.enqueue([&op, iters] {
    for (int i = 0; i < iters; ++i) op();
  });
  const EventPtr e1 = s.record();
  gate->open();
  e1->synchronize();
  return comm_.max_over_ranks(e1->seconds_since(*e0) / iters);
}

costmodel::Measurement Sweeper::prepare(Stream& s, const Op& op) {
  double estimate = batch(s, op, 1);
  const bool slow = estimate >= o_.large_s;
  if (!slow) estimate = batch(s, op, 1);
  costmodel::Measurement m;
  m.batch =
      static_cast<int>(std::clamp(std::ceil(o_.batch_target_s / std::max(estimate, 1e-9)), 1.0, 1000.0));
  if (!slow)
    for (int w = 0; w < o_.warmup; ++w) batch(s, op, m.batch);
  m.repeats = std::max(1, slow ? std::min(o_.large_repeats, o_.repeats) : o_.repeats);
  return m;
}

std::vector<costmodel::Measurement> Sweeper::points(Stream& s, const std::vector<Op>& ops,
                                                    const std::string& sweep,
                                                    const std::function<std::string(std::size_t)>& label) {
  std::vector<costmodel::Measurement> ms;
  ms.reserve(ops.size());
  for (const Op& op : ops) ms.push_back(prepare(s, op));
  int passes = 0;
  for (const auto& m : ms) passes = std::max(passes, m.repeats);
  std::vector<std::vector<double>> t(ops.size());
  for (int r = 0; r < passes; ++r) {
    const auto pass_start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      costmodel::Measurement& m = ms[i];
      if (r >= m.repeats) continue;
      t[i].push_back(batch(s, ops[i], m.batch));
      if (r + 1 < m.repeats) continue;
      m.sweep = sweep;
      m.seconds = costmodel::median(t[i]);
      m.min_s = *std::min_element(t[i].begin(), t[i].end());
      m.max_s = *std::max_element(t[i].begin(), t[i].end());
      m.times_s = t[i];
      if (label) report(sweep, label(i), m.seconds);
    }
    if (label && r + 1 < passes && progress_ && comm_.rank() == 0) {
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count();
      progress_({sweep, fmt::format("pass {} of {} over {} points", r + 1, passes, ops.size()), done_, total_,
                 wall, r + 1});
    }
  }
  return ms;
}

void Sweeper::report(const std::string& sweep, const std::string& label, double seconds) {
  ++done_;
  if (progress_ && comm_.rank() == 0) progress_({sweep, label, done_, total_, seconds});
}

}  // namespace osdp::validate
