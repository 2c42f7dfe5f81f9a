// The watchdog's thread: look at the waits, answer questions, and on a wait that ran out, ask,
// report and end the job (parallel/watchdog.hpp).
#include "parallel/watchdog.hpp"

#include "core/errors.hpp"
#include "core/wait_report.hpp"
#include "core/watched_wait.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <memory>
#include <string>
#include <vector>

namespace meshtrain {
namespace {

constexpr int question_tag = 1;
constexpr int answer_tag = 2;

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// srun reports an MPI_Abort as its tasks' SIGKILL (exit 137), not as the code given: the report is
// also appended to the file MESHTRAIN_WATCHDOG_REPORT names, if set, so that a batch script can
// tell a timeout from other failures (slurm/train.sbatch). Best effort: the job is ending.
void leave_mark(const std::string& line) {
  const char* path = std::getenv("MESHTRAIN_WATCHDOG_REPORT");
  if (path == nullptr || *path == '\0') return;
  if (std::FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

}  // namespace

class Watchdog::Monitor {
 public:
  Monitor(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) { MPI_Comm_rank(comm_, &rank_); }

  // Drops the answers still in flight (only after a fire elsewhere, when the job is ending): their
  // buffers are left to the library rather than freed under it.
  ~Monitor() {
    for (Outgoing& o : outgoing_) {
      MPI_Request_free(&o.request);
      o.answer.release();  // NOLINT(bugprone-unused-return-value): MPI may still read it
    }
  }

  void run(const std::atomic<bool>& stop) {
    while (!stop.load()) {
      serve();
      if (const auto wait = overdue_wait(wait_records(), wait_clock_ns(), timeout_s_)) fire(*wait);
      sleep_s(poll_s);
    }
  }

 private:
  struct Outgoing {
    std::unique_ptr<WaitAnswer> answer;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  // Answers every question that has come, and forgets the answers that have left.
  void serve() {
    for (;;) {
      int waiting = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, question_tag, comm_, &waiting, &status);
      if (!waiting) break;
      WaitQuestion q;
      MPI_Recv(&q, sizeof q, MPI_BYTE, status.MPI_SOURCE, question_tag, comm_, MPI_STATUS_IGNORE);
      q.group[sizeof q.group - 1] = '\0';
      auto answer =
          std::make_unique<WaitAnswer>(answer_question(q, find_wait_group(q.group), wait_records(), wait_clock_ns()));
      outgoing_.push_back({std::move(answer), MPI_REQUEST_NULL});
      MPI_Isend(outgoing_.back().answer.get(), sizeof(WaitAnswer), MPI_BYTE, status.MPI_SOURCE, answer_tag, comm_,
                &outgoing_.back().request);
    }
    outgoing_.remove_if([](Outgoing& o) {
      int done = 0;
      MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  void serve_for(double seconds) {
    const std::int64_t until = wait_clock_ns() + std::int64_t(seconds * 1e9);
    while (wait_clock_ns() < until) {
      serve();
      sleep_s(poll_s);
    }
  }

  // The ranks the wait depends on: a message's peer, or the rest of the group.
  std::vector<int> counterparts(const WaitRecord& wait) const {
    if (wait.ticket.peer >= 0) return {wait.ticket.peer};
    std::vector<int> others;
    for (int r : wait.ticket.group->members()) {
      if (r != rank_) others.push_back(r);
    }
    return others;
  }

  // Asks each counterpart, answering the others' questions meanwhile, for at most grace_s.
  std::vector<AskedRank> ask(const WaitRecord& wait) {
    const WaitQuestion question = question_about(wait, rank_);
    const std::vector<int> ranks = counterparts(wait);
    std::vector<WaitAnswer> answers(ranks.size());
    std::vector<MPI_Request> sent(ranks.size()), received(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      MPI_Irecv(&answers[i], sizeof(WaitAnswer), MPI_BYTE, ranks[i], answer_tag, comm_, &received[i]);
      MPI_Isend(&question, sizeof question, MPI_BYTE, ranks[i], question_tag, comm_, &sent[i]);
    }
    std::vector<AskedRank> asked(ranks.size());
    std::vector<bool> answered(ranks.size(), false);
    const std::int64_t until = wait_clock_ns() + std::int64_t(grace_s * 1e9);
    std::size_t pending = ranks.size();
    while (pending > 0 && wait_clock_ns() < until) {
      serve();
      for (std::size_t i = 0; i < ranks.size(); ++i) {
        int done = 0;
        if (!answered[i]) MPI_Test(&received[i], &done, MPI_STATUS_IGNORE);
        if (done) {
          answered[i] = true;
          --pending;
        }
      }
      if (pending > 0) sleep_s(poll_s / 5);
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      asked[i].world_rank = ranks[i];
      if (answered[i]) asked[i].answer = answers[i];
      // A stopped rank's question may never leave: the job ends, so the requests are dropped, not waited on.
      if (!answered[i]) MPI_Cancel(&received[i]);
      MPI_Request_free(&sent[i]);
      if (!answered[i]) MPI_Request_free(&received[i]);
    }
    return asked;
  }

  [[noreturn]] void fire(const WaitRecord& wait) {
    const std::vector<AskedRank> asked = ask(wait);
    const std::string line = watchdog_report(rank_, wait, timeout_s_, wait_clock_ns(), asked, grace_s);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    leave_mark(line);
    serve_for(grace_s);
    mark_watchdog_fired();  // waits that can give up (NCCL) abort their communicators now
    sleep_s(4 * poll_s);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, exit_code::collective_timeout);
    std::abort();  // MPI_Abort does not return
  }

  MPI_Comm comm_;
  double timeout_s_;
  int rank_ = 0;
  std::list<Outgoing> outgoing_;
};

Watchdog::Watchdog(MPI_Comm world, double timeout_s) : timeout_s_(timeout_s) {
  if (timeout_s_ <= 0) return;
  MESHTRAIN_MPI_CHECK(MPI_Comm_dup(world, comm_.out()), "every rank must start the watchdog together");
  MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN);  // a lost peer must not end the asker with another code
  thread_ = std::thread([this] { Monitor(comm_.get(), timeout_s_).run(stop_); });
}

Watchdog::~Watchdog() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace meshtrain
