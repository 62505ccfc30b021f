// failure_test.cc: typed failures (util::Status::Code and the rank to blame) survive the
// paths that make them, and cluster recovery chooses by them (runtime::remedy_for):
//  * a lost TCP peer, a silent one and an unreachable or refusing worker carry the kind
//    and the peer's rank up through the transport and the collectives;
//  * a worker's refusal crosses the wire as its kind: too little memory stays too little
//    memory at the root (fewer nodes would not help), another refusal reads as refused;
//  * recovery gives up on too little memory, puts a refusing member out and loses one
//    that vanished.
#include <gtest/gtest.h>

#include <thread>

#include "model/loader.h"
#include "model/synthetic.h"
#include "net/collectives.h"
#include "net/tcp_transport.h"
#include "net/wire.h"
#include "plan/plan.h"
#include "runtime/cluster.h"
#include "runtime/protocol.h"
#include "runtime/slicer.h"
#include "runtime/worker.h"
#include "net_loopback.h"
#include "scratch.h"

namespace {

using util::Status;
using Code = util::Status::Code;
using runtime::Remedy;
using runtime::remedy_for;

TEST(Status, CarriesItsKindAndRankThroughWrapping) {
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().code(), Code::kOk);
  const Status plain = Status::error("x");
  EXPECT_FALSE(plain.ok());
  EXPECT_EQ(plain.code(), Code::kOther);
  EXPECT_EQ(plain.rank(), -1);
  EXPECT_FALSE(Status::error("x", Code::kOk).ok());  // an error is never ok
  const Status lost = Status::error("worker a closed the connection", Code::kLostPeer);
  const Status at2 = lost.at_rank(2);
  EXPECT_EQ(at2.rank(), 2);
  EXPECT_EQ(at2.at_rank(5).rank(), 2);  // the innermost layer that knows the rank wins
  const Status w = at2.wrap("step: ", " (again)");
  EXPECT_EQ(w.message(), "step: worker a closed the connection (again)");
  EXPECT_TRUE(w.is(Code::kLostPeer));
  EXPECT_EQ(w.rank(), 2);
  EXPECT_EQ(Status().at_rank(3).rank(), -1);  // ok stays ok, with no rank
  EXPECT_STREQ(util::code_name(Code::kTooLittleMemory), "too little memory");
}

TEST(TypedFailure, LostPeerCarriesItsRankThroughTheCollectives) {
  auto c = net::make_tcp_cluster(3);
  ASSERT_TRUE(c.ok()) << c.error();
  (*c)[2].reset();  // worker rank 2 goes away
  Status st1;
  std::thread t1([&] {
    net::Collectives coll(*(*c)[1], {net::SyncType::kQ8_0, net::AllReduceAlgo::kAllGather, 5.0});
    std::vector<float> x(64, 1.0f);
    st1 = coll.all_reduce(x);
  });
  net::Collectives coll(*(*c)[0], {net::SyncType::kQ8_0, net::AllReduceAlgo::kAllGather, 5.0});
  std::vector<float> x(64, 1.0f);
  const Status st0 = coll.all_reduce(x);
  t1.join();
  ASSERT_FALSE(st0.ok());
  EXPECT_TRUE(st0.is(Code::kLostPeer)) << util::code_name(st0.code()) << ": " << st0.message();
  EXPECT_EQ(st0.rank(), 2) << st0.message();
  EXPECT_EQ(remedy_for(st0, true), Remedy::kLose);
  ASSERT_FALSE(st1.ok());
  EXPECT_TRUE(st1.is(Code::kLostPeer)) << st1.message();
  EXPECT_EQ(st1.rank(), 2) << st1.message();
}

TEST(TypedFailure, SilentPeerTimesOutWithItsRank) {
  auto c = net::make_tcp_cluster(3);
  ASSERT_TRUE(c.ok()) << c.error();
  net::Collectives coll(*(*c)[0], {net::SyncType::kQ8_0, net::AllReduceAlgo::kStar, 0.3});
  std::vector<float> x(100, 1.0f);
  const Status st = coll.all_reduce(x);  // ranks 1 and 2 never join
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(st.is(Code::kTimeout)) << st.message();
  EXPECT_GE(st.rank(), 1);
  EXPECT_NE(st.message().find((*c)[0]->peer_name(st.rank())), std::string::npos) << st.message();
  // A silent in-process peer too.
  auto ip = net::make_in_process_cluster(2);
  auto m = ip[0]->recv_expect(1, net::MessageType::kPing, 0.1);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(m.status().is(Code::kTimeout));
  EXPECT_EQ(m.status().rank(), 1);
}

TEST(TypedFailure, UnreachableAndRefusingWorkersAreToldApartAtConnect) {
  uint16_t port;
  { net::Loopback lb; port = lb.listener.port(); }  // closed again: nothing listens
  int failed = -1;
  auto gone = net::TcpTransport::connect_root({"127.0.0.1:" + std::to_string(port)}, net::TcpOptions{}, &failed);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(gone.status().is(Code::kLostPeer)) << gone.error();
  EXPECT_EQ(gone.status().rank(), 1);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(remedy_for(gone.status(), true), Remedy::kLose);
  for (const auto& [root_key, worker_key] : {std::pair{"a", "b"}, std::pair{"", "b"}, std::pair{"a", ""}}) {
    SCOPED_TRACE(std::string("root key '") + root_key + "', worker key '" + worker_key + "'");
    auto bad = net::make_tcp_cluster(2, root_key, worker_key);
    ASSERT_FALSE(bad.ok());
    EXPECT_TRUE(bad.status().is(Code::kRefused)) << util::code_name(bad.status().code()) << ": " << bad.error();
    EXPECT_EQ(bad.status().rank(), 1);
    EXPECT_EQ(remedy_for(bad.status(), true), Remedy::kPutOut);
  }
}

TEST(TypedFailure, ErrorCodesCrossTheWire) {
  struct Case {
    uint16_t wire;
    Code at_root;
  };
  for (const Case& k : {Case{uint16_t(net::ErrorCode::kOther), Code::kRefused},
                        Case{uint16_t(net::ErrorCode::kKeyMismatch), Code::kRefused},
                        Case{uint16_t(net::ErrorCode::kIntegrity), Code::kIntegrity},
                        Case{uint16_t(net::ErrorCode::kTooLittleMemory), Code::kTooLittleMemory},
                        Case{77, Code::kRefused}}) {  // a code of a newer build
    SCOPED_TRACE(k.wire);
    net::Writer w;
    w.put_u16(k.wire);
    w.put_string("why");
    const Status st = net::peer_gave_up("worker w", w.take());
    EXPECT_EQ(st.code(), k.at_root) << st.message();
  }
  EXPECT_EQ(net::error_code(Status::error("x", Code::kTooLittleMemory)), net::ErrorCode::kTooLittleMemory);
  EXPECT_EQ(net::error_code(Status::error("x", Code::kRefused)), net::ErrorCode::kOther);
}

// A worker session on an in-process transport, given one setup it refuses; what the root
// reads back.
Status setup_reply(const runtime::WorkerOptions& o, const runtime::Setup& s) {
  auto t = net::make_in_process_cluster(2);
  Status worker;
  std::thread w([&] { worker = runtime::run_worker_session(*t[1], o); });
  Status st = t[0]->send(1, runtime::msg_type(runtime::Msg::kSetup), runtime::encode_message(s), 5.0);
  if (st.ok()) {
    auto m = t[0]->recv_expect(1, runtime::msg_type(runtime::Msg::kSetupReply), 30.0);
    st = m.ok() ? Status() : m.status();
  }
  w.join();
  EXPECT_EQ(worker.code(), st.code()) << worker.message();  // the worker ends with the same kind
  return st;
}

TEST(TypedFailure, WorkerRefusalsArriveAtTheRootAsTheirKind) {
  const std::string path = shardlm_test::scratch_path("failure_toy.gguf");
  ASSERT_TRUE(model::write_synthetic_model(path, *model::shape_by_name("toy"), tensor::Type::Q8_0, 11).ok());
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.error();
  auto p = plan::make_plan(runtime::shape_of((*m)->config, (*m)->weights), {1, 1}, false);
  ASSERT_TRUE(p.ok()) << p.error();
  runtime::Setup s;
  s.model_hash = "abc";
  s.config = (*m)->config;
  s.slice = p->nodes[1];
  s.run.ctx = 64;
  s.slice_bytes = uint64_t(1) << 60;  // more than any machine's memory
  const Status memory = setup_reply({}, s);
  ASSERT_FALSE(memory.ok());
  EXPECT_TRUE(memory.is(Code::kTooLittleMemory)) << util::code_name(memory.code()) << ": " << memory.message();
  EXPECT_EQ(memory.rank(), 1);
  EXPECT_EQ(remedy_for(memory, true), Remedy::kGiveUp);  // fewer nodes would not help
  // A --model worker given a root of another model refuses: put out, not lost.
  runtime::WorkerOptions local;
  local.model_path = path;
  s.slice_bytes = 1000;
  const Status other = setup_reply(local, s);
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(other.is(Code::kRefused)) << util::code_name(other.code()) << ": " << other.message();
  EXPECT_EQ(other.rank(), 1);
  EXPECT_EQ(remedy_for(other, true), Remedy::kPutOut);
  EXPECT_EQ(remedy_for(other, false), Remedy::kLose);  // nobody named: only the silent are lost
}

TEST(TypedFailure, RecoveryChoosesByKind) {
  for (Code c : {Code::kOther, Code::kLostPeer, Code::kTimeout, Code::kIntegrity, Code::kProtocol,
                 Code::kBadInput}) {
    EXPECT_EQ(remedy_for(Status::error("x", c, 1), true), Remedy::kLose) << util::code_name(c);
    EXPECT_EQ(remedy_for(Status::error("x", c), false), Remedy::kLose) << util::code_name(c);
  }
  EXPECT_EQ(remedy_for(Status::error("x", Code::kRefused, 1), true), Remedy::kPutOut);
  EXPECT_EQ(remedy_for(Status::error("x", Code::kTooLittleMemory), false), Remedy::kGiveUp);
  // The words do not matter: a message that reads like a refusal is not one.
  EXPECT_EQ(remedy_for(Status::error("worker a gave up: cluster key, speaks protocol", Code::kLostPeer, 1), true),
            Remedy::kLose);
}

}  // namespace
