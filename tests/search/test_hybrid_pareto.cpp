// The exact hybrid search's Pareto filter (search/internal/hybrid_pareto.hpp) against brute force: on random
// labels in runs, it keeps exactly the labels that fit and that no label of the same degree before it
// (in the order transient, persistent, time, rank) is no worse than in all three, in that order, and
// asks `keep` only of those.
#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "search/internal/hybrid_pareto.hpp"

namespace osdp {
namespace {

using search::detail::Grown;
using search::detail::Label;

// The labels brute force keeps, in the filter's order, as indices into grown.labels.
std::vector<int> brute_force(const Grown& grown, double budget) {
  const auto& ls = grown.labels;
  const auto key = [&](std::size_t i) {
    return std::tie(ls[i].t, ls[i].transient, ls[i].persistent, ls[i].time, grown.rank[i]);
  };
  std::vector<int> kept;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    if (ls[i].persistent + ls[i].transient > budget) continue;
    bool beaten = false;
    for (std::size_t j = 0; j < ls.size() && !beaten; ++j)
      beaten = j != i && ls[j].persistent + ls[j].transient <= budget && ls[j].t == ls[i].t &&
               ls[j].transient <= ls[i].transient && ls[j].persistent <= ls[i].persistent &&
               ls[j].time <= ls[i].time && key(j) < key(i);
    if (!beaten) kept.push_back(static_cast<int>(i));
  }
  std::sort(kept.begin(), kept.end(), [&](int a, int b) {
    return key(static_cast<std::size_t>(a)) < key(static_cast<std::size_t>(b));
  });
  return kept;
}

TEST_CASE("the hybrid Pareto filter keeps what brute force keeps and in its order", "[hybrid][brute]") {
  std::mt19937 rng(20261127);
  int kept_total = 0, refused_total = 0;
  for (int trial = 0; trial < 300; ++trial) {
    // Few distinct values, so that ties and equal labels are common; runs of 0-12 labels, some of
    // them in order already (as the chains' runs mostly are).
    const int values = 2 + static_cast<int>(rng() % 6);
    auto pick = [&] { return static_cast<double>(rng() % static_cast<unsigned>(values)); };
    Grown grown;
    const int runs = 1 + static_cast<int>(rng() % 5);
    std::int64_t rank = 0;
    for (int r = 0; r < runs; ++r) {
      const int n = static_cast<int>(rng() % 13);
      const std::size_t first = grown.labels.size();
      for (int k = 0; k < n; ++k) {
        Label l;
        l.t = 1 << (rng() % 2);
        l.transient = pick();
        l.persistent = pick();
        l.time = pick();
        l.op = static_cast<int>(grown.labels.size());  // identifies the label in the arena
        grown.labels.push_back(l);
        grown.rank.push_back(rank++);
      }
      if (rng() % 2 == 0) {  // this run in the filter's order
        std::vector<std::size_t> order(grown.labels.size() - first);
        for (std::size_t k = 0; k < order.size(); ++k) order[k] = first + k;
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
          const auto& x = grown.labels[a];
          const auto& y = grown.labels[b];
          return std::tie(x.t, x.transient, x.persistent, x.time, grown.rank[a]) <
                 std::tie(y.t, y.transient, y.persistent, y.time, grown.rank[b]);
        });
        std::vector<Label> labels;
        std::vector<std::int64_t> ranks;
        for (std::size_t k : order) {
          labels.push_back(grown.labels[k]);
          ranks.push_back(grown.rank[k]);
        }
        std::copy(labels.begin(), labels.end(), grown.labels.begin() + static_cast<std::ptrdiff_t>(first));
        std::copy(ranks.begin(), ranks.end(), grown.rank.begin() + static_cast<std::ptrdiff_t>(first));
        for (std::size_t k = first; k < grown.labels.size(); ++k) grown.labels[k].op = static_cast<int>(k);
      }
      grown.end_run();
    }
    const double budget = 2.0 * (values - 1) * (rng() % 4 == 0 ? 0.5 : 1.0);
    const auto expected = brute_force(grown, budget);

    // `keep` refuses labels of odd time; it must be asked of the survivors only.
    std::vector<Label> arena;
    std::vector<int> asked;
    const auto out = search::detail::pareto(arena, grown, budget, [&](const Label& l) {
      asked.push_back(l.op);
      return static_cast<int>(l.time) % 2 == 0;
    });
    INFO("trial " << trial);
    CHECK(asked == expected);
    std::vector<int> got;
    for (int a : out) got.push_back(arena[static_cast<std::size_t>(a)].op);
    std::vector<int> want;
    for (int i : expected)
      if (static_cast<int>(grown.labels[static_cast<std::size_t>(i)].time) % 2 == 0) want.push_back(i);
    CHECK(got == want);
    kept_total += static_cast<int>(want.size());
    refused_total += static_cast<int>(expected.size() - want.size());
  }
  // The trials exercise both: labels kept and labels `keep` refused.
  CHECK(kept_total > 100);
  CHECK(refused_total > 100);
}

}  // namespace
}  // namespace osdp
