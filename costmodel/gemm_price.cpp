// GemmPrice (gemm_price.hpp): the roofline corrected by the measured shapes near the one priced.
#include "costmodel/gemm_price.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "costmodel/calibration.hpp"

namespace osdp::costmodel {

namespace {
std::array<double, 4> log_shape(const GemmPrice::Shape& s) {
  return {std::log2(static_cast<double>(s[0])), std::log2(static_cast<double>(s[1])),
          std::log2(static_cast<double>(s[2])), std::log2(static_cast<double>(s[3]))};
}
}  // namespace

std::size_t GemmPrice::ShapeHash::operator()(const Shape& s) const {
  std::size_t h = 0;
  for (const std::int64_t x : s) h = h * 1000003u ^ std::hash<std::int64_t>{}(x);
  return h;
}

GemmPrice::GemmPrice(Roofline roofline, const std::vector<GemmTime>& measured)
    : roofline_(std::move(roofline)) {
  for (const GemmTime& t : measured) {
    const Shape s{t.m, t.n, t.k, t.count};
    if (t.m < 1 || t.n < 1 || t.k < 1 || t.count < 1 || !(t.seconds > 0)) continue;
    // A shape measured twice keeps its last time, as the calibration file's order gives them.
    measured_[s] = t.seconds;
  }
  for (const auto& [s, seconds] : measured_)
    points_.push_back({log_shape(s), std::log(seconds / roofline_(s))});
}

bool GemmPrice::measured(const Shape& s) const {
  return measured_.count(s) > 0;
}

namespace {
// The correction at `at` from the points other than `skip` (the roofline's weight 1 at ratio 0).
template <typename Points>
double correction(const std::array<double, 4>& at, const Points& points, std::size_t skip, double reach) {
  double weights = 1.0, sum = 0.0;
  for (std::size_t j = 0; j < points.size(); ++j) {
    if (j == skip) continue;
    double d2 = 0;
    for (std::size_t i = 0; i < 4; ++i) d2 += (at[i] - points[j].at[i]) * (at[i] - points[j].at[i]);
    const double d = std::sqrt(d2);
    if (d >= reach) continue;
    const double w = (reach - d) / (reach * d);
    weights += w * w;
    sum += w * w * points[j].log_ratio;
  }
  return sum / weights;
}
}  // namespace

double GemmPrice::leave_one_out_error() const {
  if (points_.size() < 2) return 0.0;
  double sse = 0;
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const double e = points_[i].log_ratio - correction(points_[i].at, points_, i, kReach);
    sse += e * e;
  }
  return std::sqrt(sse / static_cast<double>(points_.size()));
}

double GemmPrice::seconds(const Shape& s) const {
  if (const auto it = measured_.find(s); it != measured_.end()) return it->second;
  const double roof = roofline_(s);
  if (points_.empty()) return roof;
  {
    std::lock_guard<std::mutex> lock(memo_->mutex);
    if (const auto it = memo_->seconds.find(s); it != memo_->seconds.end()) return it->second;
  }
  double price = roof * std::exp(correction(log_shape(s), points_, points_.size(), kReach));
  // Monotone against what was measured: never below a measured shape it contains (no larger in any of
  // m, n, k, count), never above one that contains it; where the measurements themselves disagree
  // (a contained shape measured slower than a containing one), the slower bound.
  double low = 0, high = std::numeric_limits<double>::infinity();
  for (const auto& [at, t] : measured_) {
    const bool below = at[0] <= s[0] && at[1] <= s[1] && at[2] <= s[2] && at[3] <= s[3];
    const bool above = at[0] >= s[0] && at[1] >= s[1] && at[2] >= s[2] && at[3] >= s[3];
    if (below) low = std::max(low, t);
    if (above) high = std::min(high, t);
  }
  price = std::max(low, std::min(price, high));
  std::lock_guard<std::mutex> lock(memo_->mutex);
  memo_->seconds.emplace(s, price);
  return price;
}

}  // namespace osdp::costmodel
