#include "validate/executor/launch_list.hpp"

#include <map>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::validate {

std::vector<Launch> launch_list(const sim::Schedule& schedule, bool one_stream) {
  const auto& tasks = schedule.tasks;
  std::vector<Launch> list(tasks.size());
  // covered[s][o]: the latest task of stream o that stream s has waited for so far (-1: none).
  std::map<int, std::map<int, int>> covered;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    Launch& l = list[t];
    l.task = static_cast<int>(t);
    l.stream = one_stream ? 0 : static_cast<int>(tasks[t].stream);
    std::map<int, int> latest;  // other stream -> its latest dependency of this task
    for (const int d : tasks[t].deps) {
      if (d < 0 || static_cast<std::size_t>(d) >= t)
        throw Error(fmt::format("schedule: task {} ({}) depends on task {}, which is not issued before it", t,
                                tasks[t].name, d));
      const int ds = one_stream ? 0 : static_cast<int>(tasks[static_cast<std::size_t>(d)].stream);
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
      list[static_cast<std::size_t>(d)].record = true;
    }
  }
  return list;
}

}  // namespace osdp::validate
