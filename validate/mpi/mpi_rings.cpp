// The mpi backend's ring collectives. On a ring of N ranks (rank r sends to r + 1 and receives from
// r - 1, mod N) over a buffer of N chunks:
//   all-gather      step s = 0 .. N-2: send chunk r - s, receive chunk r - s - 1 (rank r holds chunk r
//                   first, every chunk after N - 1 steps);
//   reduce-scatter  step s = 0 .. N-2: send the partial sum of chunk r - s - 1 (at step 0 the rank's own
//                   input of it), receive the previous rank's partial sum of chunk r - s - 2 and add the
//                   rank's input of that chunk; after N - 1 steps chunk r's sum over every rank is on r;
//   all-reduce      the reduce-scatter in place, then the all-gather, on chunks bounded by i elems / N
//                   (i = 0 .. N: sizes differ by one at most where N does not divide elems).
// Each step moves one chunk over every link of the ring in both directions at once, N - 1 steps a pass:
// what costmodel/collective.hpp prices. Sums are added in ring order (deterministic; not the order of a
// tree, so a chunk's float sum may differ from MPI_Allreduce's in its last bits).
#include <algorithm>
#include <cstring>
#include <string>

#include "validate/mpi/mpi_backend.hpp"
#include "validate/mpi/mpi_check.hpp"

namespace osdp::validate {

namespace {

// Chunk c (taken mod n) of a ring of n ranks.
int ring_chunk(int c, int n) {
  return ((c % n) + n) % n;
}

// The first element of chunk c of `elems` split into n (i elems / n).
std::size_t chunk_begin(std::size_t elems, int c, int n) {
  return elems * static_cast<std::size_t>(c) / static_cast<std::size_t>(n);
}

}  // namespace

int MpiCommunicator::next_ring_tag() {
  // Point-to-point sends of the executor use tags 2 m + {0, 1} (micro-batch m); these stay above them.
  constexpr int kRingTagBase = 1 << 14, kRingTags = 1 << 13;
  return kRingTagBase + static_cast<int>(ring_sequence_++ % kRingTags);
}

void MpiCommunicator::ring_step(const float* send, std::size_t send_n, float* recv, std::size_t recv_n,
                                int tag, const std::string& what, std::size_t bytes,
                                std::unique_lock<std::mutex>& lock) {
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  check_mpi(MPI_Irecv(recv, count(recv_n, what), MPI_FLOAT, prev, tag, comm_, &requests[0]), "MPI_Irecv",
            what, job_rank_);
  check_mpi(MPI_Isend(send, count(send_n, what), MPI_FLOAT, next, tag, comm_, &requests[1]), "MPI_Isend",
            what, job_rank_);
  complete(requests[0], what, bytes, &lock);
  complete(requests[1], what, bytes, &lock);
}

void MpiCommunicator::all_gather(Stream& /*s*/, const float* shard, float* full, std::size_t shard_elems,
                                 const std::string& what) {
  std::unique_lock lock(*mutex_);
  begin(what);
  (void)count(shard_elems, what);
  const std::size_t bytes = shard_elems * static_cast<std::size_t>(size_) * sizeof(float);
  float* mine = full + static_cast<std::size_t>(rank_) * shard_elems;
  if (shard != mine) std::memmove(mine, shard, shard_elems * sizeof(float));
  const int tag = next_ring_tag();
  for (int s = 0; s + 1 < size_; ++s) {
    const auto out = static_cast<std::size_t>(ring_chunk(rank_ - s, size_));
    const auto in = static_cast<std::size_t>(ring_chunk(rank_ - s - 1, size_));
    ring_step(full + out * shard_elems, shard_elems, full + in * shard_elems, shard_elems, tag, what, bytes,
              lock);
  }
}

void MpiCommunicator::reduce_scatter(Stream& /*s*/, const float* full, float* shard, std::size_t shard_elems,
                                     const std::string& what) {
  std::unique_lock lock(*mutex_);
  begin(what);
  (void)count(shard_elems, what);
  const std::size_t bytes = shard_elems * static_cast<std::size_t>(size_) * sizeof(float);
  const float* mine = full + static_cast<std::size_t>(rank_) * shard_elems;
  if (size_ == 1) {
    if (shard != mine) std::memmove(shard, mine, shard_elems * sizeof(float));
    return;
  }
  ring_scratch_.resize(2 * shard_elems);
  float* partial = ring_scratch_.data();  // the partial sum this rank sends next
  float* received = partial + shard_elems;
  const int tag = next_ring_tag();
  for (int s = 0; s + 1 < size_; ++s) {
    const auto out = static_cast<std::size_t>(ring_chunk(rank_ - s - 1, size_));
    const auto in = static_cast<std::size_t>(ring_chunk(rank_ - s - 2, size_));
    ring_step(s == 0 ? full + out * shard_elems : partial, shard_elems, received, shard_elems, tag, what,
              bytes, lock);
    const float* input = full + in * shard_elems;
    for (std::size_t i = 0; i < shard_elems; ++i) partial[i] = input[i] + received[i];
  }
  // The last step's chunk is r - N = r: this rank's sum (shard may be in `full`, read no more).
  std::memcpy(shard, partial, shard_elems * sizeof(float));
}

void MpiCommunicator::all_reduce(Stream& /*s*/, float* buf, std::size_t elems, const std::string& what) {
  std::unique_lock lock(*mutex_);
  begin(what);
  (void)count(elems, what);
  const std::size_t bytes = elems * sizeof(float);
  if (size_ == 1) return;
  auto begin_of = [&](int c) { return chunk_begin(elems, c, size_); };
  auto size_of = [&](int c) { return begin_of(c + 1) - begin_of(c); };
  ring_scratch_.resize(size_of(0) + 1);  // the largest chunk: elems / N rounded up
  float* received = ring_scratch_.data();
  const int tag = next_ring_tag();
  for (int s = 0; s + 1 < size_; ++s) {  // reduce-scatter in place
    const int out = ring_chunk(rank_ - s - 1, size_), in = ring_chunk(rank_ - s - 2, size_);
    ring_step(buf + begin_of(out), size_of(out), received, size_of(in), tag, what, bytes, lock);
    float* sum = buf + begin_of(in);
    for (std::size_t i = 0, n = size_of(in); i < n; ++i) sum[i] += received[i];
  }
  for (int s = 0; s + 1 < size_; ++s) {  // all-gather of the sums
    const int out = ring_chunk(rank_ - s, size_), in = ring_chunk(rank_ - s - 1, size_);
    ring_step(buf + begin_of(out), size_of(out), buf + begin_of(in), size_of(in), tag, what, bytes, lock);
  }
}

}  // namespace osdp::validate
