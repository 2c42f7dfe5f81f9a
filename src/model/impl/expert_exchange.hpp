// Expert parallelism's token exchange (share/docs/usage.md, Mixture of experts): an MoE block's
// rows, in global expert order on the rank that routed them, travel by all-to-all to the ep rank
// that holds their expert, and the experts' outputs travel back the same way. Ep rank r holds
// experts [r·El, (r+1)·El), so the rows for r are one contiguous run of the sender's rows.
//
// A received buffer holds the rows from source 0, then source 1, …, each source's rows in its
// expert order: the experts' grouped products run over ep·El row groups, one per (source, local
// expert). Without an expert-parallel group (ep 1) nothing travels: the received rows are the
// routed rows and the groups are the E experts'. Internal to model/.
#pragma once

#include "core/exec.hpp"
#include "kernels/grouped_linear.hpp"
#include "parallel/comm.hpp"

#include <cstdint>
#include <numeric>
#include <vector>

namespace meshtrain {

// One micro-batch's exchange for one MoE block, on the host: built once by plan_exchange after the
// routing, read by forward's two all-to-alls and backward's two.
struct ExchangePlan {
  std::vector<std::int64_t> sent_counts, received_counts;  // per expert: E kept counts | El per source
  std::vector<RowGroup> groups;                            // (ep·El): the received rows by source and expert
  std::size_t received = 0;                                // rows received in total
  // Per ep peer, in elements (rows × C): what goes to it and where it starts in the routed rows,
  // what comes from it and where it lands in the received ones (the alltoallv's arrays).
  std::vector<std::size_t> send_elements, send_displs, recv_elements, recv_displs;
  // The same for the rows' assignment ids (lora.dropout on the experts; kernels/lora_dropout.hpp), two per row.
  std::vector<std::size_t> send_ids, send_id_displs, recv_ids, recv_id_displs;

  void reserve(int ep, int experts) {
    for (auto* v : {&send_elements, &send_displs, &recv_elements, &recv_displs, &send_ids, &send_id_displs, &recv_ids,
                    &recv_id_displs}) {
      v->assign(std::size_t(ep), 0);
    }
    sent_counts.assign(std::size_t(experts), 0);
    received_counts.assign(std::size_t(experts), 0);
    groups.assign(std::size_t(experts), RowGroup{});
  }
};

class ExpertExchange {
 public:
  // `ep` the expert-parallel group (none, or a group of one: nothing travels); E experts in all.
  ExpertExchange(Comm* ep, int experts) : ep_(ep != nullptr && ep->size() > 1 ? ep : nullptr), experts_(experts) {}

  int size() const { return ep_ ? ep_->size() : 1; }
  int rank() const { return ep_ ? ep_->rank() : 0; }
  int local_experts() const { return experts_ / size(); }
  bool moves() const { return ep_ != nullptr; }

  // The counts travel first, once per routing, where the routing computed them (on a device, on the
  // device, in stream order): kept [E] this rank's rows per expert → received [E], El per source rank,
  // what the rows' all-to-all will bring. The caller reads `received` back with the routing into the
  // plan's received_counts. Nothing travels at ep 1.
  void exchange_counts(const std::int64_t* kept, std::int64_t* received) const {
    if (moves()) ep_->alltoall(kept, received, std::size_t(local_experts()));
  }

  // From the routing's row offsets over the E experts (offsets[e] … offsets[e+1]: expert e's rows),
  // on the host, and under ep the received counts (exchange_counts') already in p.received_counts.
  void plan_exchange(ExchangePlan& p, const int* offsets, std::size_t row_elements) const {
    const int P = size(), El = local_experts();
    for (int e = 0; e < experts_; ++e) p.sent_counts[std::size_t(e)] = offsets[e + 1] - offsets[e];
    if (!moves()) p.received_counts = p.sent_counts;
    std::size_t landed = 0;
    for (int peer = 0; peer < P; ++peer) {
      const std::size_t q = std::size_t(peer), first = landed;
      for (int e = 0; e < El; ++e) {
        const std::size_t rows = std::size_t(p.received_counts[q * El + e]);
        p.groups[q * El + e] = RowGroup{int(landed), int(rows), e};
        landed += rows;
      }
      const std::size_t send_first = std::size_t(offsets[peer * El]);
      const std::size_t sent = std::size_t(offsets[(peer + 1) * El]) - send_first;
      p.send_displs[q] = send_first * row_elements;
      p.send_elements[q] = sent * row_elements;
      p.recv_displs[q] = first * row_elements;
      p.recv_elements[q] = (landed - first) * row_elements;
      p.send_id_displs[q] = send_first * 2;
      p.send_ids[q] = sent * 2;
      p.recv_id_displs[q] = first * 2;
      p.recv_ids[q] = (landed - first) * 2;
    }
    p.received = landed;
  }

  // Rows in the sender's expert order → the experts' ranks (forward's dispatch, backward's output
  // gradients). The kernels that wrote `rows` must be done (the caller fences).
  template <class Real>
  void dispatch(const ExchangePlan& p, const Real* rows, Real* received) const {
    if (!moves()) return;
    ep_->alltoallv(rows, p.send_elements.data(), p.send_displs.data(), received, p.recv_elements.data(),
                   p.recv_displs.data());
  }
  // The rows' assignment ids (R, 2) → the received rows' (Rr, 2), as dispatch sends the rows.
  void dispatch_ids(const ExchangePlan& p, const std::int64_t* ids, std::int64_t* received) const {
    if (!moves()) return;
    ep_->alltoallv(ids, p.send_ids.data(), p.send_id_displs.data(), received, p.recv_ids.data(),
                   p.recv_id_displs.data());
  }
  // The reverse: the experts' results back to the ranks that routed the rows.
  template <class Real>
  void give_back(const ExchangePlan& p, const Real* received, Real* rows) const {
    if (!moves()) return;
    ep_->alltoallv(received, p.recv_elements.data(), p.recv_displs.data(), rows, p.send_elements.data(),
                   p.send_displs.data());
  }

 private:
  Comm* ep_;
  int experts_;
};

}  // namespace meshtrain
