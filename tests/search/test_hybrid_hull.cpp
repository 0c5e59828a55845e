// The hybrid search's unit relaxation (search/hybrid_bounds.hpp): hull_of_sums, the Minkowski sum
// of the operators' lower hulls, against brute force, the lower hull of every sum of one point per set.
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "search/hybrid_bounds.hpp"

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

TEST_CASE("the hull of the operators' sums is the Minkowski sum of their hulls", "[hybrid][brute]") {
  std::mt19937 rng(20261127);
  int points_checked = 0;
  SECTION("small integers: exact sums and many collinear points") {
    std::uniform_int_distribution<int> coord(0, 12), count(1, 6), sets(1, 5);
    for (int trial = 0; trial < 500; ++trial) {
      std::vector<Points> in(static_cast<std::size_t>(sets(rng)));
      for (Points& set : in)
        for (int k = count(rng); k-- > 0;) set.emplace_back(coord(rng), coord(rng));
      const Points want = brute_force(in);
      const Points got = from_hulls(in);
      REQUIRE(got == want);
      points_checked += static_cast<int>(want.size());
    }
    CHECK(points_checked > 1000);
  }
  SECTION("reals: the same points within rounding") {
    std::uniform_real_distribution<double> bytes(0, 1e9), time(0, 1e-2);
    std::uniform_int_distribution<int> count(1, 8), sets(1, 6);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<Points> in(static_cast<std::size_t>(sets(rng)));
      for (Points& set : in)
        for (int k = count(rng); k-- > 0;) set.emplace_back(bytes(rng), time(rng));
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
