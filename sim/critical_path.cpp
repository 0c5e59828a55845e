#include "sim/critical_path.hpp"

#include <algorithm>
#include <array>
#include <iterator>

#include <fmt/format.h>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

#include "costmodel/error.hpp"

namespace osdp::sim {

namespace {

// A collective's ring time on the network: its steps, each as long as the slowest step of the ring of
// the first rank of its stage.
double ring_seconds(const Schedule& s, const Task& t, const NetworkModel& net) {
  const Group g = t.group.resolved(s.world_size);
  const int r0 = g.first(t.stage * s.stage_size());
  Tick slowest = 0;
  for (int i = 0; i < g.size; ++i) {
    const int r = g.member(r0, i), next = g.member(r0, (i + 1) % g.size);
    slowest = std::max(slowest, net.ring_step_ticks(t.kind, t.bytes, g.size, r, next, t.level, t.calibrated));
  }
  return to_seconds(slowest * costmodel::ring_steps(collective_of(t.kind), g.size));
}

}  // namespace

CriticalPath critical_path(const Schedule& s, const NetworkModel& net) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  const std::size_t n = s.tasks.size();
  Graph g(n);
  std::vector<double> weight(n, 0.0);
  std::vector<std::array<int, kStreams>> last_of_stream(static_cast<std::size_t>(std::max(1, s.pp)));
  for (auto& l : last_of_stream) l.fill(-1);
  for (std::size_t t = 0; t < n; ++t) {
    const Task& task = s.tasks[t];
    for (int d : task.deps) boost::add_edge(static_cast<std::size_t>(d), t, g);
    int& prev = last_of_stream[static_cast<std::size_t>(task.stage)][static_cast<int>(task.stream)];
    if (prev >= 0) boost::add_edge(static_cast<std::size_t>(prev), t, g);
    prev = static_cast<int>(t);
    if (is_collective(task.kind)) {
      weight[t] = ring_seconds(s, task, net);
    } else if (task.kind == TaskKind::kSend) {
      const int r = task.stage * s.stage_size();
      weight[t] = to_seconds(net.p2p_ticks(task.bytes, r, r + task.peer * s.stage_size()));
    } else {
      weight[t] = task.duration_s;
    }
  }
  std::vector<std::size_t> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    throw Error("the schedule's dependencies have a cycle");
  }
  std::reverse(order.begin(), order.end());  // topological_sort yields reverse topological order
  std::vector<double> finish(n, 0.0);
  std::vector<int> from(n, -1);
  for (std::size_t v : order) {
    finish[v] += weight[v];
    for (auto [e, end] = boost::out_edges(v, g); e != end; ++e) {
      const std::size_t w = boost::target(*e, g);
      if (finish[v] > finish[w]) {
        finish[w] = finish[v];
        from[w] = static_cast<int>(v);
      }
    }
  }
  CriticalPath cp;
  if (n == 0) return cp;
  // finish[] holds start times until a vertex is visited; after the walk it is the finish time.
  int last = static_cast<int>(std::max_element(finish.begin(), finish.end()) - finish.begin());
  cp.seconds = finish[last];
  for (int v = last; v >= 0; v = from[v]) cp.tasks.push_back(v);
  std::reverse(cp.tasks.begin(), cp.tasks.end());
  return cp;
}

}  // namespace osdp::sim
