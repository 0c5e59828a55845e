// The exact hybrid search's Pareto filter (search/internal/hybrid_pareto.hpp) against brute force: on random
// labels in runs, it keeps exactly the labels that fit and that no label of the same degree before it
// (in the order transient, persistent, time, rank) is no worse than in all three, in that order, and
// asks `keep` only of those. pareto_sum, which grows the labels from their parents as it filters them,
// against growing every child and filtering them so; and the memo of its steps
// (search/internal/hybrid_memo.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "search/internal/hybrid_memo.hpp"
#include "search/internal/hybrid_pareto.hpp"

namespace osdp {
namespace {

using search::detail::Grown;
using search::detail::Label;
using search::detail::Staircases;
using search::detail::SumChild;
using search::detail::SumMemo;
using search::detail::SumRow;
using search::detail::SumScratch;

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

// What a label is, for comparing two runs: its values, parent and choice.
auto fields(const Label& l) {
  return std::tie(l.persistent, l.transient, l.time, l.parent, l.op, l.item, l.t);
}

// pareto_sum against growing every child of its rows (those that fit, pass `fits` and `admit`, of the
// parents that take the row's item) and filtering them with pareto (held to brute force above): the
// same labels kept in the same order, `keep` asked of the same labels in the same order, and the
// children it records are those. Parents in any order (cut into staircases), few distinct values (ties
// and equal labels), rows of a re-layout (one per staircase) or of a unit's items (one per item and
// staircase, parents taking a prefix of the items), a cut that refuses some children, a budget that
// stops rows; in some trials, parents whose bytes rise by less than the sum's rounding may take
// (pareto's path).
TEST_CASE("pareto_sum keeps what growing every child and filtering keeps, in its order", "[hybrid][brute]") {
  std::mt19937 rng(20261128);
  int kept_total = 0, recorded = 0, unordered = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int values = 2 + static_cast<int>(rng() % 5);
    auto pick = [&] { return static_cast<double>(rng() % static_cast<unsigned>(values)); };
    // Parents' bytes 2^60 apart by 256 (ulp 256 there): rises under the rounding check.
    const bool huge = trial % 10 == 9;
    const double base = huge ? std::ldexp(1.0, 60) : 0.0, step = huge ? 256.0 : 1.0;
    std::vector<Label> arena;
    std::vector<int> parents;
    const int n_parents = static_cast<int>(rng() % 16);
    for (int k = 0; k < n_parents; ++k) {
      Label l;
      l.t = 1 << (rng() % 2);
      l.transient = pick();
      l.persistent = base + step * pick();
      l.time = pick();
      arena.push_back(l);
      parents.push_back(k);
    }
    if (rng() % 2 == 0)  // as a step's labels are: each degree and transient a staircase
      std::sort(parents.begin(), parents.end(), [&](int a, int b) {
        const Label &x = arena[static_cast<std::size_t>(a)], &y = arena[static_cast<std::size_t>(b)];
        return std::tie(x.t, x.transient, x.persistent, x.time) <
               std::tie(y.t, y.transient, y.persistent, y.time);
      });
    const Staircases ps(arena, parents);
    const int t = 2;
    std::vector<SumRow> rows;
    std::vector<std::size_t> takes;
    const bool items = rng() % 3 != 0;
    if (!items) {  // a re-layout: each staircase's labels plus the time from their degree
      for (std::size_t g = 0; g < ps.size(); ++g) {
        SumRow r;
        r.stair = g;
        r.time = ps.at[ps.first[g]].t == t ? 0.0 : pick();
        rows.push_back(r);
      }
    } else {
      const int n_items = 1 + static_cast<int>(rng() % 5), f = 1 + static_cast<int>(rng() % 2);
      std::vector<std::size_t> order(static_cast<std::size_t>(n_items));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (std::size_t p = 0; p < ps.at.size(); ++p)
        takes.push_back(rng() % static_cast<unsigned>(n_items + 1));
      std::vector<SumRow> item(static_cast<std::size_t>(n_items));
      for (int k = 0; k < n_items; ++k) {
        SumRow& r = item[static_cast<std::size_t>(k)];
        r.states = step * pick();
        r.act = step * pick();
        r.f = f;
        r.transient = pick();
        r.time = pick();
        r.op = 7;
        r.item = k;
        r.rank_scale = n_items;
        r.rank_offset = k;
      }
      for (std::size_t q = 0; q < order.size(); ++q)
        for (std::size_t g = 0; g < ps.size(); ++g) {
          SumRow r = item[order[q]];
          r.stair = g;
          r.q = q;
          rows.push_back(r);
        }
    }
    const double budget = base + step * (values - 1) * (1.5 + rng() % 3);
    const double owed_p = step * pick(), owed_x = pick();
    const auto fits = [&](const Label& l) {
      return l.persistent + owed_p + std::max(l.transient, owed_x) <= budget;
    };
    const auto admit = [&](const Label& l) {
      return static_cast<long long>(l.time * 7 + l.transient * 3 + (l.persistent - base) / step) % 5 != 0;
    };
    std::vector<Label> asked, asked_ref;
    const auto keeper = [](std::vector<Label>& log) {
      return [&log](const Label& l) {
        log.push_back(l);
        return static_cast<long long>(l.time + l.transient) % 3 != 0;
      };
    };
    const std::vector<std::size_t>* takes_of = items ? &takes : nullptr;

    // Every child grown, then filtered.
    std::vector<Label> arena_ref = arena;
    Grown grown;
    for (const SumRow& r : rows) {
      for (std::size_t p = ps.first[r.stair]; p < ps.first[r.stair + 1]; ++p) {
        if (takes_of && takes[p] <= r.q) continue;
        const Label n = search::detail::grown_child(ps.at[p], r, t);
        if (!(n.persistent + n.transient <= budget) || !fits(n) || !admit(n)) continue;
        grown.labels.push_back(n);
        grown.rank.push_back(static_cast<std::int64_t>(p) * r.rank_scale + r.rank_offset);
      }
      grown.end_run();
    }
    const std::vector<int> want = search::detail::pareto(arena_ref, grown, budget, keeper(asked_ref));

    SumScratch scratch;
    std::vector<int> got;
    std::vector<SumChild> record;
    const bool ordered = search::detail::pareto_sum(arena, ps, rows, takes_of, t, budget, fits, admit,
                                                    keeper(asked), scratch, got, &record);
    INFO("trial " << trial);
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k)
      CHECK(fields(arena[static_cast<std::size_t>(got[k])]) ==
            fields(arena_ref[static_cast<std::size_t>(want[k])]));
    REQUIRE(asked.size() == asked_ref.size());
    for (std::size_t k = 0; k < asked.size(); ++k) CHECK(fields(asked[k]) == fields(asked_ref[k]));
    if (ordered) {
      // The children recorded are those `keep` was asked of: a memo's replay is the same step.
      REQUIRE(record.size() == asked.size());
      for (std::size_t k = 0; k < record.size(); ++k) {
        const SumChild& c = record[k];
        Label l;
        l.persistent = c.persistent;
        l.transient = c.transient;
        l.time = c.time;
        l.parent = ps.at[c.p].index;
        l.op = rows[c.row].op;
        l.item = rows[c.row].item;
        l.t = t;
        CHECK(fields(l) == fields(asked[k]));
      }
      ++recorded;
    } else {
      ++unordered;
    }
    kept_total += static_cast<int>(got.size());
  }
  CHECK(kept_total > 500);
  CHECK(recorded > 400);
  CHECK(unordered > 10);
}

TEST_CASE("the memo of Pareto steps finds a step by every value it depends on, bit for bit", "[hybrid]") {
  std::vector<Label> arena(3);
  for (int k = 0; k < 3; ++k) {
    arena[static_cast<std::size_t>(k)].persistent = 10.0 - k;
    arena[static_cast<std::size_t>(k)].time = k;
    arena[static_cast<std::size_t>(k)].t = 1;
  }
  const Staircases ps(arena, {2, 1, 0});
  std::vector<SumRow> rows(1);
  rows[0].stair = 0;
  rows[0].time = 0.5;
  std::vector<double> key, other;
  SumMemo::key_of(ps, rows, 2, 100.0, 1.0, 2.0, key);
  SumMemo memo(1e6);
  CHECK(!memo.find(key, SumMemo::hash(key)).found);
  memo.insert(key, SumMemo::hash(key), {{1, 2, 3, 0, 0}});
  const SumMemo::Found found = memo.find(key, SumMemo::hash(key));
  REQUIRE(found.found);
  CHECK(found.last - found.first == 1);
  CHECK(found.first->time == 3);
  std::vector<double> none;  // a step with no child is a step found
  SumMemo::key_of(ps, {}, 2, 100.0, 1.0, 2.0, none);
  memo.insert(none, SumMemo::hash(none), {});
  CHECK(memo.find(none, SumMemo::hash(none)).found);
  // The same step over other parents, another degree, budget or row: not found.
  SumMemo::key_of(ps, rows, 1, 100.0, 1.0, 2.0, other);
  CHECK(!memo.find(other, SumMemo::hash(other)).found);
  SumMemo::key_of(ps, rows, 2, std::nextafter(100.0, 200.0), 1.0, 2.0, other);
  CHECK(!memo.find(other, SumMemo::hash(other)).found);
  rows[0].time = std::nextafter(0.5, 1.0);
  SumMemo::key_of(ps, rows, 2, 100.0, 1.0, 2.0, other);
  CHECK(!memo.find(other, SumMemo::hash(other)).found);
  arena[0].time = -0.0;
  const Staircases moved(arena, {2, 1, 0});
  rows[0].time = 0.5;
  SumMemo::key_of(moved, rows, 2, 100.0, 1.0, 2.0, other);
  CHECK(!memo.find(other, SumMemo::hash(other)).found);  // 0.0 and -0.0: not the same bits
  // Past its bytes, a memo adds no more steps.
  SumMemo small(8.0 * static_cast<double>(key.size()));
  small.insert(key, SumMemo::hash(key), {{1, 2, 3, 0, 0}});
  CHECK(!small.find(key, SumMemo::hash(key)).found);
}

}  // namespace
}  // namespace osdp
