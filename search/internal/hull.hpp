// The lower convex hull of a Pareto front, shared by the flat exact solver's LP bound (exact.cpp)
// and the hybrid search's per-unit bound (hybrid_context.hpp).
#pragma once

#include <vector>

namespace osdp::search::detail {

// Indices into `front` (x ascending, y descending) of its lower convex hull; x(p) and y(p) read a
// point's coordinates.
template <class Point, class X, class Y>
std::vector<int> lower_hull(const std::vector<Point>& front, X x, Y y) {
  std::vector<int> h;
  for (int i = 0; i < static_cast<int>(front.size()); ++i) {
    while (h.size() >= 2) {
      const Point& a = front[static_cast<std::size_t>(h[h.size() - 2])];
      const Point& b = front[static_cast<std::size_t>(h.back())];
      const Point& c = front[static_cast<std::size_t>(i)];
      // b is above the segment a-c: drop it.
      if ((y(b) - y(a)) * (x(c) - x(a)) >= (y(c) - y(a)) * (x(b) - x(a)))
        h.pop_back();
      else
        break;
    }
    h.push_back(i);
  }
  return h;
}

}  // namespace osdp::search::detail
