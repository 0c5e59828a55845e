// The launch list (validate/launch_list.hpp): which events each task waits for and which tasks
// record one. A hand-made schedule with the waits derived here, and random schedules where the
// pruned waits must still order every dependency (reachability through stream order and waits,
// brute force) while never waiting for what the stream already covered.
#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <vector>

#include "costmodel/error.hpp"
#include "validate/executor/launch_list.hpp"

using osdp::sim::Schedule;
using osdp::sim::Stream;
using osdp::sim::Task;
using osdp::validate::launch_list;

namespace {

Task task(Stream s, std::vector<int> deps) {
  Task t;
  t.name = "t";
  t.stream = s;
  t.deps = std::move(deps);
  return t;
}

constexpr Stream C = Stream::kCompute;
constexpr Stream M = Stream::kComm;

}  // namespace

TEST_CASE("launch list: a task waits for the latest dependency on the other stream only",
          "[executor][launch]") {
  Schedule s;
  s.tasks = {
      task(M, {}),         // 0 all-gather a
      task(C, {0}),        // 1 forward a: waits 0
      task(M, {}),         // 2 all-gather b
      task(C, {0, 1, 2}),  // 3 forward b: 2 covers 0 (comm order), 1 is its own stream
      task(C, {3, 0}),     // 4 backward b: 0 already covered by 3's wait
      task(M, {4}),        // 5 reduce-scatter b: waits 4
      task(M, {2}),        // 6 its own stream
      task(C, {5, 6}),     // 7 optimizer: waits 6 (covers 5)
  };
  const auto l = launch_list(s);
  REQUIRE(l.size() == 8);
  const std::vector<std::vector<int>> waits = {{}, {0}, {}, {2}, {}, {4}, {}, {6}};
  const std::vector<bool> records = {true, false, true, false, true, false, true, false};
  for (std::size_t t = 0; t < l.size(); ++t) {
    INFO("task " << t);
    CHECK(l[t].task == static_cast<int>(t));
    CHECK(l[t].stream == static_cast<int>(s.tasks[t].stream));
    CHECK(l[t].waits == waits[t]);
    CHECK(l[t].record == records[t]);
  }
  SECTION("on one stream nothing waits or records") {
    for (const auto& x : launch_list(s, true)) {
      CHECK(x.stream == 0);
      CHECK(x.waits.empty());
      CHECK_FALSE(x.record);
    }
  }
  SECTION("a dependency issued later is an error") {
    s.tasks[1].deps = {2};
    CHECK_THROWS_AS(launch_list(s), osdp::Error);
  }
}

TEST_CASE("launch list: random schedules keep every dependency ordered", "[executor][launch]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    Schedule s;
    const int n = 2 + static_cast<int>(rng() % 40);
    for (int t = 0; t < n; ++t) {
      std::vector<int> deps;
      for (int d = 0; d < t; ++d)
        if (rng() % 5 == 0) deps.push_back(d);
      s.tasks.push_back(task(rng() % 2 ? C : M, deps));
    }
    const auto l = launch_list(s);
    // Edges that order work: each stream's issue order, and each wait.
    std::vector<std::vector<int>> before(static_cast<std::size_t>(n));
    std::vector<int> last = {-1, -1};
    std::set<int> waited;
    for (int t = 0; t < n; ++t) {
      const int st = l[static_cast<std::size_t>(t)].stream;
      if (last[static_cast<std::size_t>(st)] >= 0)
        before[static_cast<std::size_t>(t)].push_back(last[static_cast<std::size_t>(st)]);
      last[static_cast<std::size_t>(st)] = t;
      for (const int w : l[static_cast<std::size_t>(t)].waits) {
        REQUIRE(l[static_cast<std::size_t>(w)].stream != st);
        before[static_cast<std::size_t>(t)].push_back(w);
        waited.insert(w);
      }
    }
    // Everything that finishes before t (reachability, tasks in issue order).
    std::vector<std::set<int>> reach(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t)
      for (const int b : before[static_cast<std::size_t>(t)]) {
        reach[static_cast<std::size_t>(t)].insert(b);
        reach[static_cast<std::size_t>(t)].insert(reach[static_cast<std::size_t>(b)].begin(),
                                                  reach[static_cast<std::size_t>(b)].end());
      }
    for (int t = 0; t < n; ++t) {
      INFO("trial " << trial << " task " << t);
      for (const int d : s.tasks[static_cast<std::size_t>(t)].deps)
        CHECK(reach[static_cast<std::size_t>(t)].count(d) == 1);
      // No wait is implied by the others: dropping it loses an ordering some dependency needs, or
      // at least the waited task was not already before t through the stream's earlier waits.
      for (const int w : l[static_cast<std::size_t>(t)].waits) {
        const int prev = [&] {
          for (int p = t - 1; p >= 0; --p)
            if (l[static_cast<std::size_t>(p)].stream == l[static_cast<std::size_t>(t)].stream) return p;
          return -1;
        }();
        CHECK((prev < 0 || reach[static_cast<std::size_t>(prev)].count(w) == 0));
      }
      CHECK(l[static_cast<std::size_t>(t)].record == (waited.count(t) == 1));
    }
  }
}
