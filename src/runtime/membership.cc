// membership.cc: the root's workers over time (cluster.h, recovery): a step executed with
// recovery, losing a worker, a spare or a rejoining worker taking a place, re-forming and
// replaying, and the health that /health and /metrics read.
#include <algorithm>
#include <cstdio>

#include "net/tcp_transport.h"
#include "runtime/cluster.h"
#include "runtime/stepping.h"
#include "util/timer.h"

namespace runtime {

using util::Expected;
using util::Status;

Remedy remedy_for(const Status& st, bool blames_member) {
  if (st.is(Status::Code::kTooLittleMemory)) return Remedy::kGiveUp;
  if (blames_member && st.is(Status::Code::kRefused)) return Remedy::kPutOut;
  return Remedy::kLose;
}

namespace {

const char* state_name(int places_filled, int places) {
  return places_filled == places ? "full size" : "degraded";
}

bool reachable(const std::string& addr) {  // its port accepts a TCP connection
  auto hp = net::parse_host_port(addr);
  return hp.ok() && net::connect_tcp(*hp, 0.5, "worker").ok();
}

}  // namespace

// A failed step changed nothing the root keeps (logs, samplers): after a recovery it is
// run again as it was.
Expected<StepReply> Cluster::execute_recovering(Step& s, std::vector<StepReply>* replies) {
  RETURN_IF_ERROR(broken_);
  maybe_rejoin();
  RETURN_IF_ERROR(broken_);
  Expected<StepReply> mine = execute(s, step_tokens_, replies);
  while (!mine) {
    if (!o_.recover || members_.empty()) {
      const Status failed = step_failed(mine.status(), o_.transport || !members_.empty());
      if (o_.transport) broken_ = failed;  // MPI: the ranks are out of step for good
      return failed;
    }
    RETURN_IF_ERROR(recover(mine.status()));
    mine = execute(s, step_tokens_, replies);
  }
  step_ok_since_recovery_ = true;
  return mine;
}

void Cluster::drop_links() {
  node_.reset();
  t_.reset();  // every worker ends its session and listens again
}

int Cluster::member_of(const Status& st) const {
  const int r = st.rank();
  return r >= 1 && size_t(r) < rank_member_.size() ? rank_member_[size_t(r)] : -1;
}

void Cluster::lose(int m, const std::string& why) {
  Member& mb = members_[size_t(m)];
  const double now = util::now_seconds();
  for (int& p : places_)
    if (p == m) p = -1;
  ++health_.lost;
  publish_health();
  std::fprintf(stderr, "recovery: lost worker %s: %s\n", mb.addr.c_str(), why.c_str());
  if (mb.rejoined && now - mb.since < o_.flap_window_s) {
    mb.state = Member::State::kOut;
    std::fprintf(stderr, "recovery: %s was lost again %.0f s after it rejoined: not taken back automatically "
                 "(restart the root to use it again)\n", mb.addr.c_str(), now - mb.since);
  } else {
    mb.state = Member::State::kLost;
  }
  mb.since = now;
  mb.next_try = now + o_.rejoin_every_s;
  mb.backoff_s = o_.rejoin_every_s;
}

// A session of the member's own: the handshake checks its version, key and link setting
// without touching the running cluster. A refusal puts it out (named on stderr).
bool Cluster::verify_alone(Member& mb) {
  net::TcpOptions quick = tcp_options();  // the cluster waits meanwhile: a frozen host costs ~1 s
  quick.connect_timeout_s = 0.5;
  quick.handshake_timeout_s = 1.0;
  quick.setup_timeout_s = 1.0;
  auto t = net::TcpTransport::connect_root({mb.addr}, quick);
  if (t) {
    (void)(*t)->send(1, msg_type(Msg::kShutdown), {}, 1.0);
    return true;
  }
  if (remedy_for(t.status(), true) == Remedy::kPutOut) {  // there, but will not take part
    mb.state = Member::State::kOut;
    std::fprintf(stderr, "recovery: worker %s refused: %s\n", mb.addr.c_str(), t.error().c_str());
  }
  return false;
}

// A spare that is there but refuses (another version, another key) is named now; one that
// is not there yet is tried when it is needed.
void Cluster::check_spares() {
  for (Member& mb : members_)
    if (mb.home < 0 && reachable(mb.addr)) verify_alone(mb);
}

// Fills empty places: a member back from a loss takes its own place; idle spares the rest.
void Cluster::fill_places() {
  for (size_t p = 0; p < places_.size(); ++p)
    if (places_[p] < 0)
      for (size_t m = 0; m < members_.size(); ++m)
        if (members_[m].home == int(p) && members_[m].state == Member::State::kIdle) places_[p] = int(m);
  for (size_t p = 0; p < places_.size(); ++p)
    if (places_[p] < 0)
      for (size_t m = 0; m < members_.size() && places_[p] < 0; ++m)
        if (members_[m].state == Member::State::kIdle &&
            std::find(places_.begin(), places_.end(), int(m)) == places_.end())
          places_[p] = int(m);
  for (int p : places_)
    if (p >= 0 && members_[size_t(p)].state == Member::State::kIdle) members_[size_t(p)].state = Member::State::kActive;
}

int Cluster::lose_unreachable(const std::string& why, int named) {
  int n = 0;
  for (size_t r = 1; r < rank_member_.size(); ++r) {
    const int m = rank_member_[r];
    if (members_[size_t(m)].state == Member::State::kActive &&
        (m == named || !reachable(members_[size_t(m)].addr))) {
      lose(m, why);
      ++n;
    }
  }
  return n;
}

Status Cluster::recover(const Status& why) {
  const double t0 = util::now_seconds();
  drop_links();
  // The worker the error names, and every active one whose port no longer answers, are lost.
  if (lose_unreachable(why.message(), member_of(why)) == 0) {
    if (!step_ok_since_recovery_) {  // a fault that re-forming did not cure
      broken_ = step_failed(why.wrap("", " (again right after a recovery)"));
      return broken_;
    }
    std::fprintf(stderr, "recovery: %s; no worker is gone, forming the cluster again\n", why.message().c_str());
  }
  return reform("re-formed", t0);
}

// Forms the cluster over the places filled (spares taking empty ones), replays every KV
// slot and reports. A member that cannot join is dropped (refused: out; unreachable: lost)
// and the cluster formed without it.
Status Cluster::reform(const std::string& event, double t0) {
  Status last;
  for (int attempt = 0; attempt < 2 * int(members_.size()) + 2; ++attempt) {
    fill_places();
    Reform rep;
    int failed = -1;
    Status st = form(&rep, &failed);
    if (st.ok()) {  // a failure of the replay names nobody in particular
      // Every node's block tables are new: the replay carries them whole. Cached blocks no
      // table holds are replayed by no history: a node that joined has no rows for them.
      blocks_.unsync();
      blocks_.drop_cache();
      blocks_.set_host_capacity(no_prefix_sharing().empty() ? o_.run.kv_host_blocks : 0);
      std::vector<StepReply> replies;
      st = replay(history_, o_.run.max_batch,
                  [&](Step& s, std::span<const int32_t> tokens) {
                    // A lane-order segment kept whole past a cut log (SlotHistory::truncate)
                    // writes rows past the slot's table: blocks for them first.
                    for (const StepSegment& g : s.segs)
                      if (!blocks_.reserve(g.slot, g.pos + g.n))
                        return Status::error("the KV pool is full: replaying slot " + std::to_string(g.slot) +
                                             " needs more blocks than are free; raise --kv-memory",
                                             Status::Code::kTooLittleMemory);
                    auto r = execute(s, tokens, &replies);
                    return r ? util::ok_status() : r.status();
                  },
                  &rep.replayed);
    }
    if (st.ok()) {
      reformed(event, rep, t0);
      return util::ok_status();
    }
    last = st;
    if (failed < 0) failed = member_of(st);
    const Remedy remedy = remedy_for(st, failed >= 0);
    if (remedy == Remedy::kGiveUp) break;  // fewer nodes would not help
    drop_links();
    if (remedy == Remedy::kLose) {
      if (lose_unreachable(st.message(), failed) > 0) continue;
      break;  // nobody to blame
    }
    Member& mb = members_[size_t(failed)];  // there, but refuses
    for (int& p : places_)
      if (p == failed) p = -1;
    mb.state = Member::State::kOut;
    std::fprintf(stderr, "recovery: worker %s refused: %s\n", mb.addr.c_str(), st.message().c_str());
  }
  drop_links();
  broken_ = last.wrap("the cluster could not be formed again: ");
  publish_health();
  return broken_;
}

void Cluster::reformed(const std::string& event, const Reform& rep, double t0) {
  ++health_.recoveries;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s on %d nodes (%s); re-sent %.1f MB of weights to %d worker(s); replayed %d tokens in %d "
                "steps; resumed in %.2f s",
                event.c_str(), n_nodes(), state_name(n_nodes() - 1, int(places_.size())),
                double(rep.streamed_bytes) / 1e6, rep.streamed_to, rep.replayed.tokens, rep.replayed.steps,
                util::now_seconds() - t0);
  health_.last_recovery = buf;
  std::fprintf(stderr, "recovery: %s\n", buf);
  publish_health();
  step_ok_since_recovery_ = false;
}

// Between steps: a lost worker whose address answers (and which passes the handshake on
// its own) is taken back; the cluster is re-formed with it.
void Cluster::maybe_rejoin() {
  if (!o_.recover || members_.empty()) return;
  const double now = util::now_seconds();
  if (now < next_rejoin_check_) return;
  next_rejoin_check_ = now + 0.5;
  bool back = false;
  for (Member& mb : members_) {
    if (mb.state != Member::State::kLost || now < mb.next_try) continue;
    mb.backoff_s = std::min(30.0, mb.backoff_s * 2);
    mb.next_try = now + mb.backoff_s;
    if (!reachable(mb.addr) || !verify_alone(mb)) continue;
    mb.state = Member::State::kIdle;
    mb.rejoined = true;
    mb.since = now;
    std::fprintf(stderr, "recovery: worker %s is back\n", mb.addr.c_str());
    back = true;
  }
  if (!back) return;
  const std::vector<int> before = places_;
  fill_places();
  if (places_ == before) return;  // it waits as a spare
  (void)reform("rejoined", now);
}

void Cluster::publish_health() {
  health_.nodes = o_.transport ? o_.transport->size()
                                : 1 + int(std::count_if(places_.begin(), places_.end(), [](int p) { return p >= 0; }));
  std::lock_guard<std::mutex> l(health_mu_);
  health_snapshot_ = health_;
}

ClusterHealth Cluster::health() const {
  std::lock_guard<std::mutex> l(health_mu_);
  return health_snapshot_;
}

}  // namespace runtime
