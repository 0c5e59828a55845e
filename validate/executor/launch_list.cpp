#include "validate/executor/launch_list.hpp"

#include <map>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::validate {

namespace {

int device_stream(sim::Stream s) {
  return s == sim::Stream::kComm ? 1 : 0;
}

}  // namespace

std::vector<Launch> launch_list(const sim::Schedule& schedule, int first, int end, bool one_stream) {
  const auto& tasks = schedule.tasks;
  std::vector<Launch> list(static_cast<std::size_t>(end - first));
  // covered[s][o]: the latest task of stream o that stream s has waited for so far (-1: none).
  std::map<int, std::map<int, int>> covered;
  for (int t = first; t < end; ++t) {
    Launch& l = list[static_cast<std::size_t>(t - first)];
    l.task = t;
    l.stream = one_stream ? 0 : device_stream(tasks[static_cast<std::size_t>(t)].stream);
    std::map<int, int> latest;  // other stream -> its latest dependency of this task
    for (const int d : tasks[static_cast<std::size_t>(t)].deps) {
      if (d >= 0 && static_cast<std::size_t>(d) < tasks.size() &&
          tasks[static_cast<std::size_t>(d)].stage != tasks[static_cast<std::size_t>(t)].stage)
        continue;  // another stage's (a receive's send)
      if (d < first || d >= t)
        throw Error(fmt::format("schedule: task {} ({}) depends on task {}, which is not issued before it", t,
                                tasks[static_cast<std::size_t>(t)].name, d));
      const int ds = one_stream ? 0 : device_stream(tasks[static_cast<std::size_t>(d)].stream);
      if (ds == l.stream) continue;  // the stream's own order
      auto [it, fresh] = latest.emplace(ds, d);
      if (!fresh && d > it->second) it->second = d;
    }
    for (const auto& [ds, d] : latest) {
      auto& seen = covered[l.stream];
      const auto c = seen.find(ds);
      if (c != seen.end() && c->second >= d) continue;
      seen[ds] = d;
      l.waits.push_back(d);
      list[static_cast<std::size_t>(d - first)].record = true;
    }
  }
  return list;
}

std::vector<Launch> launch_list(const sim::Schedule& schedule, bool one_stream) {
  return launch_list(schedule, 0, static_cast<int>(schedule.tasks.size()), one_stream);
}

}  // namespace osdp::validate
