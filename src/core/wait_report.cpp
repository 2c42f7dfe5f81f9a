// The watchdog's question, answers and report line (core/wait_report.hpp).
#include "core/wait_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace meshtrain {
namespace {

template <std::size_t N>
void copy_text(char (&to)[N], const std::string& from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

template <std::size_t N>
std::string text_of(const char (&from)[N]) {
  return std::string(from, strnlen(from, N));
}

double seconds(std::int64_t ns) { return double(ns) * 1e-9; }

// Whether this rank has started what the asker waits for: the collective, or the other end of
// its message (the asker's recv #k from this rank is this rank's send #k to it).
bool has_arrived(const WaitQuestion& q, const WaitGroup& group) {
  const std::string kind = text_of(q.kind);
  if (kind != "send" && kind != "recv") return group.collectives_started() >= q.seq;
  const int asker = group.group_rank_of(q.asker);
  if (asker < 0) return false;
  return (kind == "recv" ? group.sends_started(asker) : group.recvs_started(asker)) >= q.seq;
}

// What the records say this rank does: the waits it is in, else the last one it left.
std::string doing(const std::vector<WaitRecord>& records, std::int64_t now_ns) {
  std::string waits;
  const WaitRecord* last = nullptr;
  for (const WaitRecord& r : records) {
    if (r.active) {
      waits += fmt::format("{}waits in {} for {:.1f} s", waits.empty() ? "" : " and ", describe_wait(r.ticket),
                           seconds(now_ns - r.since_ns));
    } else if (last == nullptr || r.ended_ns > last->ended_ns) {
      last = &r;
    }
  }
  if (!waits.empty()) return waits;
  if (last == nullptr) return "is in no wait and has waited in none yet";
  return fmt::format("is in no wait (busy, or stalled outside communication) since it left {} {:.1f} s ago",
                     describe_wait(last->ticket), seconds(now_ns - last->ended_ns));
}

}  // namespace

WaitQuestion question_about(const WaitRecord& wait, int asker_world_rank) {
  WaitQuestion q;
  copy_text(q.group, wait.ticket.group->name());
  copy_text(q.kind, wait.ticket.kind);
  q.seq = wait.ticket.seq;
  q.asker = asker_world_rank;
  return q;
}

WaitAnswer answer_question(const WaitQuestion& question, const WaitGroup* group, const std::vector<WaitRecord>& records,
                           std::int64_t now_ns) {
  WaitAnswer a;
  if (group == nullptr) {
    copy_text(a.doing, fmt::format("has no group {} ({})", text_of(question.group), doing(records, now_ns)));
    return a;
  }
  a.arrived = has_arrived(question, *group) ? 1 : 0;
  std::string text = doing(records, now_ns);
  const std::string kind = text_of(question.kind);
  if (kind != "send" && kind != "recv") {
    text += fmt::format(", its last collective of group {} is #{}", group->name(), group->collectives_started());
  }
  copy_text(a.doing, text);
  return a;
}

std::string describe_wait(const WaitTicket& t) {
  const std::string group = t.group != nullptr ? t.group->name() : std::string("?");
  std::string text = fmt::format("{} #{} of group {} ({} elements)", t.kind, t.seq, group, t.count);
  if (t.peer >= 0) text += fmt::format(" {} rank {}", std::string_view(t.kind) == "send" ? "to" : "from", t.peer);
  return text;
}

std::string watchdog_report(int rank, const WaitRecord& wait, double timeout_s, std::int64_t now_ns,
                            const std::vector<AskedRank>& asked, double grace_s) {
  std::string missing;
  for (const AskedRank& r : asked) {
    if (r.answer && r.answer->arrived) continue;
    missing += missing.empty() ? "" : "; ";
    missing += r.answer ? fmt::format("rank {} {}", r.world_rank, text_of(r.answer->doing))
                        : fmt::format("rank {} did not answer within {:g} s (stopped, or its node is gone)",
                                      r.world_rank, grace_s);
  }
  if (missing.empty()) missing = "none, every rank asked has arrived (the transport itself is stuck?)";
  return fmt::format("meshtrain: watchdog: rank {} waited {:.1f} s (parallel.timeout {:g} s) in {}; not arrived: {}",
                     rank, seconds(now_ns - wait.since_ns), timeout_s, describe_wait(wait.ticket), missing);
}

}  // namespace meshtrain
