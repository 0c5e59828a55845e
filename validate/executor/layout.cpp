// The executor's layouts of an operator's parameters into slices (numerics.hpp's OperatorLayout) and
// their deterministic initial values and tokens; the shapes of attention and MLP operators the
// arithmetic reads from their weights (internal/numerics_common.hpp).
#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "validate/executor/internal/numerics_common.hpp"
#include "validate/executor/numerics.hpp"

namespace osdp::validate {
namespace detail {

using costmodel::Operator;

HeadShape head_shape(const Operator& op) {
  const costmodel::Weight *qkv = nullptr, *proj = nullptr;
  for (const auto& w : op.weights) {
    if (!is_matrix(w)) continue;
    (w.split_columns ? qkv : proj) = &w;
  }
  const auto fail = [&](const std::string& why) {
    return UsageError(fmt::format("attention {}: {}", op.name, why));
  };
  if (qkv == nullptr || proj == nullptr) throw fail("no QKV and projection weights");
  HeadShape s;
  s.g = op.split_units;
  const I q = proj->rows, rest = qkv->cols - q;
  if (s.g < 1 || rest <= 0 || rest % 2 != 0 || (rest / 2) % s.g != 0)
    throw fail(fmt::format("a {} x {} QKV weight and a {} x {} projection do not make {} key/value heads",
                           qkv->rows, qkv->cols, proj->rows, proj->cols, s.g));
  s.d = rest / 2 / s.g;
  if (q % s.d != 0 || (q / s.d) % s.g != 0)
    throw fail(fmt::format("{} query columns are not groups of heads of size {} over {} key/value heads", q,
                           s.d, s.g));
  s.a = q / s.d;
  return s;
}

I ffn_of(const Operator& op) {
  for (const auto& w : op.weights)
    if (is_matrix(w) && w.splittable && !w.split_columns) return w.rows;
  return 0;
}

bool gated(const Operator& op) {
  for (const auto& w : op.weights)
    if (w.split_columns) return w.cols == 2 * ffn_of(op);
  return false;
}

}  // namespace detail

using namespace detail;
using costmodel::Operator;
using costmodel::OperatorKind;

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t hash_name(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  return h;
}

// The sections of a column-split weight, each cut n ways (a slice holds its part of every one): Q, K,
// V of attention; gate and up of a gated MLP; the whole weight otherwise.
std::vector<I> column_sections(const Operator& op, const costmodel::Weight& w) {
  if (op.kind == OperatorKind::kAttention) {
    const HeadShape hs = head_shape(op);
    return {hs.q(), hs.k(), hs.k()};
  }
  if (op.kind == OperatorKind::kMlp && gated(op)) return {w.cols / 2, w.cols / 2};
  return {w.cols};
}

}  // namespace

I Block::cols() const {
  I c = 0;
  for (const auto& r : columns) c += r.count;
  return c;
}

OperatorLayout make_layout(const Operator& op, int n, int world) {
  OperatorLayout l;
  l.slices = n;
  const I P = op.parameters();
  l.slice_elems = (P + n - 1) / n;
  l.padded_elems = (l.slice_elems + world - 1) / world * world;
  l.shard_elems = l.padded_elems / world;
  if (n > 1) {
    const auto allowed = op.splits(n);
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end())
      throw UsageError(fmt::format("operator {} cannot be cut into {} slices", op.name, n));
  }
  std::vector<std::vector<I>> sections(op.weights.size());
  for (int wi = 0; wi < static_cast<int>(op.weights.size()); ++wi) {
    const auto& w = op.weights[static_cast<std::size_t>(wi)];
    if (is_matrix(w)) {
      if (n > 1 && !w.splittable)
        throw UsageError(fmt::format("operator {}: weight {} cannot be split", op.name, w.name));
      if (!w.split_columns) continue;
      sections[static_cast<std::size_t>(wi)] = column_sections(op, w);
      for (const I section : sections[static_cast<std::size_t>(wi)])
        if (section % n != 0)
          throw UsageError(
              fmt::format("operator {}: weight {} has a section of {} columns, not {} equal "
                          "parts",
                          op.name, w.name, section, n));
    } else {
      l.vector_weights.push_back(wi);
      l.vector_total += w.elements();
    }
  }
  const I chunk = (l.vector_total + n - 1) / n;
  for (int j = 0; j < n; ++j) {
    SliceLayout sl;
    I offset = 0;
    for (int wi = 0; wi < static_cast<int>(op.weights.size()); ++wi) {
      const auto& w = op.weights[static_cast<std::size_t>(wi)];
      if (!is_matrix(w)) continue;
      Block b;
      b.weight = wi;
      b.offset = offset;
      if (w.split_columns) {
        b.row0 = 0;
        b.rows = w.rows;
        I start = 0;
        for (const I section : sections[static_cast<std::size_t>(wi)]) {
          b.columns.push_back({start + j * (section / n), section / n});
          start += section;
        }
      } else {
        b.rows = w.rows / n;
        b.row0 = j * b.rows;
        b.columns.push_back({0, w.cols});
      }
      offset += b.rows * b.cols();
      sl.blocks.push_back(b);
    }
    sl.vector_offset = offset;
    sl.vector_start = std::min(l.vector_total, j * chunk);
    sl.vector_len = std::min(l.vector_total, (j + 1) * chunk) - sl.vector_start;
    if (offset + sl.vector_len > l.slice_elems)
      throw UsageError(fmt::format("operator {}: slice {} holds {} elements, more than ceil(P/n) = {}",
                                   op.name, j, offset + sl.vector_len, l.slice_elems));
    l.slice.push_back(std::move(sl));
  }
  return l;
}

OperatorLayout make_layout(const Operator& op, int tp, int n, int world) {
  if (tp == 1) return make_layout(op, n, world);
  if (!costmodel::tp_allowed(op, tp))
    throw UsageError(fmt::format("operator {} cannot run at TP degree {}", op.name, tp));
  const bool vocabulary = op.kind == OperatorKind::kEmbedding || op.kind == OperatorKind::kHead;
  if (!vocabulary) {  // heads and ffn columns: the split of t n
    OperatorLayout l = make_layout(op, tp * n, world);
    l.tp = tp;
    return l;
  }
  // The [h x V] table or weight: vocabulary columns by TP rank, rows by the split within.
  int table = -1;
  OperatorLayout l;
  l.tp = tp;
  l.slices = tp * n;
  for (int wi = 0; wi < static_cast<int>(op.weights.size()); ++wi) {
    const auto& w = op.weights[static_cast<std::size_t>(wi)];
    if (is_matrix(w)) {
      table = wi;
    } else {
      l.vector_weights.push_back(wi);
      l.vector_total += w.elements();
    }
  }
  if (table < 0)
    throw UsageError(fmt::format("operator {} has no weight to cut at TP degree {}", op.name, tp));
  const auto& tw = op.weights[static_cast<std::size_t>(table)];
  const I V = tw.cols, h = tw.rows;
  if (V % tp != 0 || h % n != 0)
    throw UsageError(
        fmt::format("operator {}: its {} x {} weight cannot be cut into {} vocabulary parts of {} "
                    "slices each",
                    op.name, h, V, tp, n));
  const I vt = V / tp;
  const bool head = op.kind == OperatorKind::kHead;
  if (head && l.vector_total > V)
    throw UsageError(fmt::format("operator {}: {} vector parameters, more than its {} logit columns", op.name,
                                 l.vector_total, V));
  I largest = 0;
  for (int i = 0; i < tp; ++i) {
    // The vector elements of TP rank i: the head's go with their logit column, the rest in t n chunks.
    const I lo = head ? std::min(l.vector_total, i * vt) : 0,
            hi = head ? std::min(l.vector_total, (i + 1) * vt) : 0;
    for (int j = 0; j < n; ++j) {
      SliceLayout sl;
      Block b;
      b.weight = table;
      b.offset = 0;
      b.rows = h / n;
      b.row0 = j * b.rows;
      b.columns.push_back({i * vt, vt});
      sl.blocks.push_back(b);
      sl.vector_offset = b.rows * vt;
      sl.vocab0 = i * vt;
      sl.vocab_count = vt;
      if (head) {
        const I chunk = (hi - lo + n - 1) / n;
        sl.vector_start = std::min(hi, lo + j * chunk);
        sl.vector_len = std::min(hi, lo + (j + 1) * chunk) - sl.vector_start;
      } else {
        const I chunk = (l.vector_total + tp * n - 1) / (tp * n);
        sl.vector_start = std::min(l.vector_total, (i * n + j) * chunk);
        sl.vector_len = std::min(l.vector_total, (i * n + j + 1) * chunk) - sl.vector_start;
      }
      largest = std::max(largest, sl.vector_offset + sl.vector_len);
      l.slice.push_back(std::move(sl));
    }
  }
  l.slice_elems = largest;
  l.padded_elems = (l.slice_elems + world - 1) / world * world;
  l.shard_elems = l.padded_elems / world;
  return l;
}

float initial_value(const Operator& op, int weight, I r, I c) {
  const auto& w = op.weights[static_cast<std::size_t>(weight)];
  const std::uint64_t h = mix(hash_name(op.name) ^ mix(static_cast<std::uint64_t>(weight) * 0x100000001b3ULL ^
                                                       mix(static_cast<std::uint64_t>(r * w.cols + c))));
  const double u = static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;  // [-1, 1)
  const double scale = is_matrix(w) ? 1.0 / std::sqrt(static_cast<double>(w.rows)) : 0.02;
  return static_cast<float>(u * scale);
}

namespace {
// Calls f(weight, r, c, flat index) for every element a slice holds.
template <class F>
void for_each_element(const Operator& op, const OperatorLayout& l, int j, F&& f) {
  const SliceLayout& sl = l.slice[static_cast<std::size_t>(j)];
  for (const Block& b : sl.blocks) {
    I idx = b.offset;
    for (I r = 0; r < b.rows; ++r)
      for (const auto& cr : b.columns)
        for (I c = 0; c < cr.count; ++c) f(b.weight, b.row0 + r, cr.start + c, idx++);
  }
  // The vector chunk: positions vector_start .. + len of the concatenated vector weights.
  I pos = 0, idx = sl.vector_offset;
  for (const int wi : l.vector_weights) {
    const I e = op.weights[static_cast<std::size_t>(wi)].elements();
    const I lo = std::max(pos, sl.vector_start), hi = std::min(pos + e, sl.vector_start + sl.vector_len);
    for (I t = lo; t < hi; ++t) f(wi, 0, t - pos, idx++);
    pos += e;
  }
}
}  // namespace

std::vector<float> initial_slice(const Operator& op, const OperatorLayout& l, int j) {
  std::vector<float> out(static_cast<std::size_t>(l.padded_elems), 0.0f);
  const SliceLayout& sl = l.slice[static_cast<std::size_t>(j)];
  // The matrix blocks' rows, as for_each_element lays them out (row-major from the block's offset),
  // each computed on its own: a 48-layer GPT's 657 M values took 8.8 s on one core, before every step
  // a validation runs. Spread over the cores when there are many; the values do not depend on how.
  std::vector<std::pair<const Block*, I>> rows;  // (block, elements per row)
  I total = 0;
  for (const Block& b : sl.blocks) {
    I per_row = 0;
    for (const auto& cr : b.columns) per_row += cr.count;
    rows.emplace_back(&b, per_row);
    total += b.rows * per_row;
  }
  const auto fill_rows = [&](const Block& b, I per_row, I r0, I r1) {
    for (I r = r0; r < r1; ++r) {
      I idx = b.offset + r * per_row;
      for (const auto& cr : b.columns)
        for (I c = 0; c < cr.count; ++c)
          out[static_cast<std::size_t>(idx++)] = initial_value(op, b.weight, b.row0 + r, cr.start + c);
    }
  };
  const unsigned threads = total < (I{1} << 20) ? 1u : std::max(1u, std::thread::hardware_concurrency());
  for (const auto& [b, per_row] : rows) {
    if (threads == 1 || b->rows < 2) {
      fill_rows(*b, per_row, 0, b->rows);
      continue;
    }
    std::vector<std::thread> pool;
    const I step = (b->rows + threads - 1) / threads;
    for (I r0 = 0; r0 < b->rows; r0 += step)
      pool.emplace_back(fill_rows, std::cref(*b), per_row, r0, std::min(b->rows, r0 + step));
    for (auto& t : pool) t.join();
  }
  // The vector chunk: positions vector_start .. + len of the concatenated vector weights.
  I pos = 0, idx = sl.vector_offset;
  for (const int wi : l.vector_weights) {
    const I e = op.weights[static_cast<std::size_t>(wi)].elements();
    const I lo = std::max(pos, sl.vector_start), hi = std::min(pos + e, sl.vector_start + sl.vector_len);
    for (I t = lo; t < hi; ++t) out[static_cast<std::size_t>(idx++)] = initial_value(op, wi, 0, t - pos);
    pos += e;
  }
  return out;
}

void slice_to_logical(const Operator& op, const OperatorLayout& l, int j, const float* flat,
                      std::vector<float>& logical, bool experts_only) {
  std::vector<I> base(op.weights.size());
  I p = 0;
  for (std::size_t i = 0; i < op.weights.size(); ++i) {
    base[i] = p;
    p += op.weights[i].elements();
  }
  logical.resize(static_cast<std::size_t>(p));
  for_each_element(op, l, j, [&](int w, I r, I c, I idx) {
    const auto& wt = op.weights[static_cast<std::size_t>(w)];
    if (experts_only && !wt.expert) return;
    logical[static_cast<std::size_t>(base[static_cast<std::size_t>(w)] + r * wt.cols + c)] = flat[idx];
  });
}

std::int32_t token_of(I sample, I t, I vocab) {
  return static_cast<std::int32_t>(
      mix(static_cast<std::uint64_t>(sample) * 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(t)) %
      static_cast<std::uint64_t>(vocab));
}

}  // namespace osdp::validate
