// net_loopback.h: what net_test.cc and link_test.cc share: a listener on a free loopback
// port with one connecting and one accepting end (2 s timeouts).
#pragma once
#include <string>
#include <utility>

#include "net/socket.h"
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

}  // namespace net
