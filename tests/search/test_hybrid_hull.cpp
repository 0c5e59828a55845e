// The hybrid search's unit relaxation (search/internal/hybrid_context.hpp): hull_of_sums, the Minkowski sum
// of the operators' lower hulls, against brute force, the lower hull of every sum of one point per set.
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "search/internal/hybrid_context.hpp"

namespace osdp {
namespace {

using search::detail::hull_of_sums;
using search::detail::lower_hull;
using search::detail::pareto_2d;
using search::detail::Points;

Points brute_force(const std::vector<Points>& sets) {
  Points sums{{0.0, 0.0}};
  for (const Points& set : sets) {
    Points grown;
    for (const auto& a : sums)
      for (const auto& b : set) grown.emplace_back(a.first + b.first, a.second + b.second);
    sums = grown;
  }
  return lower_hull(pareto_2d(sums));
}

Points from_hulls(const std::vector<Points>& sets) {
  std::vector<Points> hulls;
  for (const Points& set : sets) hulls.push_back(lower_hull(pareto_2d(set)));
  const Points sums = hull_of_sums(hulls);
  return sums.empty() ? sums : lower_hull(pareto_2d(sums));
}

// 1..max_sets sets of 1..max_points points, each coordinate drawn by `x` and `y`.
template <class X, class Y>
std::vector<Points> random_sets(std::mt19937& rng, int max_sets, int max_points, X x, Y y) {
  std::vector<Points> in(1 + rng() % static_cast<unsigned>(max_sets));
  for (Points& set : in)
    for (int k = 1 + static_cast<int>(rng() % static_cast<unsigned>(max_points)); k-- > 0;)
      set.emplace_back(x(rng), y(rng));
  return in;
}

TEST_CASE("the hull of the operators' sums is the Minkowski sum of their hulls", "[hybrid][brute]") {
  std::mt19937 rng(20261127);
  int points_checked = 0;
  SECTION("small integers: exact sums and many collinear points") {
    std::uniform_int_distribution<int> coord(0, 12);
    for (int trial = 0; trial < 500; ++trial) {
      const auto in = random_sets(rng, 5, 6, coord, coord);
      const Points want = brute_force(in);
      REQUIRE(from_hulls(in) == want);
      points_checked += static_cast<int>(want.size());
    }
    CHECK(points_checked > 1000);
  }
  SECTION("reals: the same points within rounding") {
    std::uniform_real_distribution<double> bytes(0, 1e9), time(0, 1e-2);
    for (int trial = 0; trial < 300; ++trial) {
      const auto in = random_sets(rng, 6, 8, bytes, time);
      const Points want = brute_force(in);
      const Points got = from_hulls(in);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        CHECK(got[i].first == Approx(want[i].first).epsilon(1e-12));
        CHECK(got[i].second == Approx(want[i].second).epsilon(1e-12));
      }
      points_checked += static_cast<int>(want.size());
    }
    CHECK(points_checked > 1000);
  }
  SECTION("a set with no point leaves no sum") {
    CHECK(hull_of_sums({{{1.0, 2.0}}, {}}).empty());
    CHECK(hull_of_sums({}) == Points{{0.0, 0.0}});
  }
}

}  // namespace
}  // namespace osdp
