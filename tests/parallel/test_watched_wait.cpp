// The watchdog's bookkeeping without a fault (core/watched_wait.hpp, core/wait_report.hpp): when a
// wait is overdue (never when the timeout is 0), what a WatchedWait records and restores, who has
// arrived at a collective or a message by the groups' counts, and the report line's words.
#include "core/wait_report.hpp"
#include "core/watched_wait.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

namespace meshtrain {
namespace {

constexpr std::int64_t second = 1'000'000'000;

WaitRecord active_since(std::int64_t since_ns, const WaitGroup& group, std::uint64_t seq) {
  WaitRecord r;
  r.ticket = {&group, "allreduce", seq, 8, -1};
  r.since_ns = since_ns;
  r.active = true;
  return r;
}

TEST(WatchedWait, OverdueOnlyPastTheTimeoutAndNeverWhenOff) {
  WaitGroup group("dp", {0, 1}, 0);
  const std::int64_t now = 100 * second;
  const std::vector<WaitRecord> records = {active_since(now - 3 * second, group, 1),
                                           active_since(now - 7 * second, group, 2)};
  EXPECT_FALSE(overdue_wait(records, now, 0.0)) << "timeout 0 is off, however old the wait";
  EXPECT_FALSE(overdue_wait(records, now, 7.5));
  const auto oldest = overdue_wait(records, now, 2.0);
  ASSERT_TRUE(oldest);
  EXPECT_EQ(oldest->ticket.seq, 2u) << "the longest-running wait is the one reported";
  std::vector<WaitRecord> ended = records;
  for (WaitRecord& r : ended) r.active = false;
  EXPECT_FALSE(overdue_wait(ended, now, 1.0)) << "a wait that has ended is not overdue";
}

std::optional<WaitRecord> record_of(const WaitGroup& group) {
  for (const WaitRecord& r : wait_records()) {
    if (r.ticket.group == &group) return r;
  }
  return std::nullopt;
}

TEST(WatchedWait, RecordsTheInnerWaitAndRestoresTheOuter) {
  WaitGroup& outer_group = new_wait_group(MPI_COMM_WORLD, "outer");
  {
    const WatchedWait outer(outer_group.collective("barrier", 0));
    {
      const WatchedWait inner(outer_group.collective("allreduce", 5));
      const auto r = record_of(outer_group);
      ASSERT_TRUE(r);
      EXPECT_TRUE(r->active);
      EXPECT_STREQ(r->ticket.kind, "allreduce");
      EXPECT_EQ(r->ticket.seq, 2u);
      EXPECT_EQ(r->ticket.count, 5u);
    }
    const auto r = record_of(outer_group);
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->active);
    EXPECT_STREQ(r->ticket.kind, "barrier");
  }
  const auto r = record_of(outer_group);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->active) << "left: the record keeps the last wait, ended";
  EXPECT_GE(r->ended_ns, r->since_ns);
  EXPECT_EQ(find_wait_group("outer"), &outer_group);
}

TEST(WaitReport, ArrivedWhenTheCollectiveOrTheMessagesOtherEndHasStarted) {
  // This rank is world rank 5, group rank 1 of {4, 5, 6}; world rank 6 asks.
  WaitGroup group("tp", {4, 5, 6}, 1);
  for (int i = 0; i < 3; ++i) group.collective("allreduce", 1);
  WaitRecord mine;  // this rank's wait, world rank 6 asks about its own
  mine.ticket = {&group, "allreduce", 4, 1, -1};
  WaitQuestion q = question_about(mine, 6);
  EXPECT_EQ(answer_question(q, &group, {}, 0).arrived, 0) << "3 started, #4 asked";
  group.collective("allreduce", 1);
  EXPECT_EQ(answer_question(q, &group, {}, 0).arrived, 1);

  // World rank 6 waits in its recv #2 from this rank: arrived once this rank started its send #2 to 6.
  WaitRecord recv;
  recv.ticket = {&group, "recv", 2, 16, 5};
  q = question_about(recv, 6);
  group.send(2, 16);
  EXPECT_EQ(answer_question(q, &group, {}, 0).arrived, 0);
  group.send(2, 16);
  EXPECT_EQ(answer_question(q, &group, {}, 0).arrived, 1);
  group.send(0, 16);  // a send to another peer counts for that peer only
  EXPECT_EQ(group.sends_started(2), 2u);
}

TEST(WaitReport, SaysWhatTheRankDoesAndWhoDidNotAnswer) {
  WaitGroup dp("dp", {0, 1, 2}, 1), world("world", {0, 1, 2}, 1);
  const std::int64_t now = 50 * second;
  for (int i = 0; i < 3; ++i) dp.collective("allreduce", 1);
  WaitRecord elsewhere = active_since(now - 2 * second, world, 9);
  WaitRecord asked_about = active_since(now - 6 * second, dp, 4);
  const WaitAnswer a = answer_question(question_about(asked_about, 0), &dp, {elsewhere}, now);
  EXPECT_EQ(a.arrived, 0);
  EXPECT_EQ(std::string(a.doing),
            "waits in allreduce #9 of group world (8 elements) for 2.0 s, its last collective of group dp is #3");

  WaitRecord left = elsewhere;
  left.active = false;
  left.ended_ns = now - 1 * second;
  EXPECT_EQ(std::string(answer_question(question_about(asked_about, 0), &dp, {left}, now).doing),
            "is in no wait (busy, or stalled outside communication) since it left allreduce #9 of group world "
            "(8 elements) 1.0 s ago, its last collective of group dp is #3");

  const std::vector<AskedRank> asked = {{1, a}, {2, std::nullopt}};
  EXPECT_EQ(watchdog_report(0, asked_about, 5, now, asked, 2.0),
            "meshtrain: watchdog: rank 0 waited 6.0 s (parallel.timeout 5 s) in allreduce #4 of group dp (8 elements); "
            "not arrived: rank 1 waits in allreduce #9 of group world (8 elements) for 2.0 s, its last collective of "
            "group dp is #3; rank 2 did not answer within 2 s (stopped, or its node is gone)");
  WaitRecord p2p;
  p2p.ticket = {&dp, "recv", 3, 64, 2};
  EXPECT_EQ(describe_wait(p2p.ticket), "recv #3 of group dp (64 elements) from rank 2");
}

}  // namespace
}  // namespace meshtrain
