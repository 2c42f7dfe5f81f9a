#include "kernels/column_sum_ticket.hpp"

#include <memory>
#include <mutex>

namespace meshtrain {

namespace {
std::mutex ticket_mutex;
std::unique_ptr<ColumnSumTicket> ticket;
}  // namespace

ColumnSumTicket column_sum_ticket() {
  const std::lock_guard<std::mutex> lock(ticket_mutex);
  if (!ticket) {
    ticket = std::make_unique<ColumnSumTicket>("meshtrain::column_sum_ticket", 1);
    // Before Kokkos finalizes (a View must not outlive it); a later initialisation makes a new one.
    Kokkos::push_finalize_hook([] {
      const std::lock_guard<std::mutex> inner(ticket_mutex);
      ticket.reset();
    });
  }
  return *ticket;
}

}  // namespace meshtrain
