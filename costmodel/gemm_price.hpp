// One price for every GEMM shape: the fitted roofline, corrected towards the calibration's measured
// shapes, so that a shape measured in calibration and a shape near it (the same GEMM at another
// batch, a slice of it) are priced by the same means.
//
//   price(s) = roofline(s) exp(c(s)),  r_i = ln(measured_i / roofline(s_i)) for each measured shape,
//   c(s) = sum_i w_i r_i / (w_0 + sum_i w_i),  w_i = ((R - d_i) / (R d_i))^2 for d_i < R, else 0,
//
// d_i the distance from s to s_i in octaves of (m, n, k, count) (Euclidean over log2 of each), R =
// kReach octaves, w_0 = 1 (the roofline's own weight). At a measured shape (d = 0) the price is its
// measured time; the correction fades with distance and is none beyond R octaves of every measured
// shape, where the roofline alone prices (Franke and Little's local inverse-distance weighting).
// A shape not measured is then held between the measured shapes it contains and those containing it
// (each of m, n, k, count no larger, or no smaller): monotone in each size wherever a measurement
// says so, the slower bound where two measurements disagree.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace osdp::costmodel {

struct GemmTime;

class GemmPrice {
 public:
  using Shape = std::array<std::int64_t, 4>;  // m, n, k, count
  using Roofline = std::function<double(const Shape&)>;
  static constexpr double kReach = 2.0;  // octaves

  GemmPrice() = default;
  GemmPrice(Roofline roofline, const std::vector<GemmTime>& measured);
  // Seconds for one GEMM of the shape (roofline alone when nothing was measured).
  double seconds(const Shape& s) const;
  // Whether the calibration measured this very shape.
  bool measured(const Shape& s) const;
  bool empty() const { return points_.empty(); }
  // The RMS of ln(measured / priced) with each measured shape priced from the others alone
  // (leave-one-out): how far a shape's time is from what the shapes near it say. 0 with fewer than two.
  double leave_one_out_error() const;

 private:
  struct Point {
    std::array<double, 4> at;  // log2 of m, n, k, count
    double log_ratio;          // ln(measured / roofline)
  };
  struct ShapeHash {
    std::size_t operator()(const Shape& s) const;
  };
  // Prices already asked (the search asks for the same shapes many times), shared by copies.
  struct Memo {
    std::mutex mutex;
    std::unordered_map<Shape, double, ShapeHash> seconds;
  };
  Roofline roofline_;
  std::vector<Point> points_;
  std::unordered_map<Shape, double, ShapeHash> measured_;
  std::shared_ptr<Memo> memo_ = std::make_shared<Memo>();
};

}  // namespace osdp::costmodel
