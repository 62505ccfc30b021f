// net_loopback.h: what net_test.cc, link_test.cc and failure_test.cc share: a listener on
// a free loopback port with one connecting and one accepting end (2 s timeouts), and N TCP
// nodes formed over loopback.
#pragma once
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/socket.h"
#include "net/tcp_transport.h"
#include "net/transport.h"
#include "util/check.h"

namespace net {

struct Loopback {
  Loopback() {
    auto l = Listener::listen("127.0.0.1", 0);
    CHECK(l.ok());
    listener = std::move(*l);
    addr = "127.0.0.1:" + std::to_string(listener.port());
  }
  Connection connect() {
    auto s = connect_tcp(parse_host_port(addr).value(), 2.0, "worker");
    CHECK(s.ok());
    return Connection(std::move(*s));
  }
  Connection accept() {
    auto s = listener.accept(2.0);
    CHECK(s.ok());
    return Connection(std::move(*s));
  }
  Listener listener;
  std::string addr;
};

using Cluster = std::vector<std::unique_ptr<Transport>>;

// N TCP nodes over loopback: rank 0 is the root, ranks 1.. are workers on ephemeral ports.
inline Expected<Cluster> make_tcp_cluster(int n, const std::string& root_key = "",
                                          const std::string& worker_key = "") {
  Cluster out(n);
  if (n == 1) {
    out = make_in_process_cluster(1);
    return out;
  }
  std::vector<Listener> listeners;
  std::vector<std::string> addrs;
  for (int i = 1; i < n; ++i) {
    auto l = Listener::listen("127.0.0.1", 0);
    if (!l.ok()) return l.status();
    addrs.push_back("127.0.0.1:" + std::to_string(l->port()));
    listeners.push_back(std::move(*l));
  }
  std::vector<std::thread> threads;
  std::vector<Status> worker_status(n);
  for (int i = 1; i < n; ++i) {
    threads.emplace_back([&, i] {
      TcpOptions o;
      o.cluster_key = worker_key;
      o.setup_timeout_s = 10;
      auto t = TcpTransport::accept_worker(listeners[i - 1], o, 10.0);
      if (!t.ok()) { worker_status[i] = t.status(); return; }
      const int rank = (*t)->rank();
      out[rank] = std::move(*t);
    });
  }
  TcpOptions o;
  o.cluster_key = root_key;
  o.setup_timeout_s = 10;
  auto root = TcpTransport::connect_root(addrs, o);
  for (auto& t : threads) t.join();
  if (!root.ok()) return root.status();
  for (int i = 1; i < n; ++i)
    if (!worker_status[i].ok()) return worker_status[i];
  out[0] = std::move(*root);
  return out;
}

}  // namespace net
