// delay_relay.cc: a TCP relay that adds a fixed one-way latency, for the network-namespace
// testbed (tools/netns_testbed.py) on machines without tc netem.
//   delay_relay LISTEN_IP:PORT TARGET_IP:PORT DELAY_US
// Every accepted connection is joined to a new connection to TARGET. Each direction has a
// reader thread that stamps every chunk it reads with its arrival time and a writer thread
// that sends the chunk when arrival + DELAY_US has passed (clock_nanosleep on an absolute
// monotonic deadline, 1 ns timer slack), so order and throughput are preserved and every
// byte is delayed by DELAY_US (plus a wakeup, ~10-50 us). TCP_NODELAY on both sides.
// Deliberately tiny and not part of shardlm: no limits, no config, exits on SIGTERM.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

long g_delay_ns = 0;

sockaddr_in parse(const std::string& s) {
  const size_t c = s.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(std::atoi(s.c_str() + c + 1)));
  if (c == std::string::npos || inet_pton(AF_INET, s.substr(0, c).c_str(), &a.sin_addr) != 1) {
    std::fprintf(stderr, "delay_relay: bad address '%s' (want IPv4:port)\n", s.c_str());
    std::exit(2);
  }
  return a;
}

long now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

struct Chunk {
  long due_ns;
  std::vector<char> bytes;  // empty: the reader saw end of stream
};

// One direction: from -> to, delayed.
void pump(int from, int to) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Chunk> q;
  std::thread writer([&] {
    prctl(PR_SET_TIMERSLACK, 1UL);
    for (;;) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !q.empty(); });
        c = std::move(q.front());
        q.pop_front();
      }
      timespec t{c.due_ns / 1000000000L, c.due_ns % 1000000000L};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) != 0) {}
      if (c.bytes.empty()) { shutdown(to, SHUT_WR); return; }
      for (size_t off = 0; off < c.bytes.size();) {
        const ssize_t n = write(to, c.bytes.data() + off, c.bytes.size() - off);
        if (n <= 0) { shutdown(from, SHUT_RD); return; }
        off += size_t(n);
      }
    }
  });
  std::vector<char> buf(1 << 16);
  for (;;) {
    const ssize_t n = read(from, buf.data(), buf.size());
    Chunk c{now_ns() + g_delay_ns, n > 0 ? std::vector<char>(buf.data(), buf.data() + n) : std::vector<char>()};
    {
      std::lock_guard<std::mutex> lk(mu);
      q.push_back(std::move(c));
    }
    cv.notify_one();
    if (n <= 0) break;
  }
  writer.join();
}

void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: delay_relay LISTEN_IP:PORT TARGET_IP:PORT DELAY_US\n");
    return 2;
  }
  const sockaddr_in listen_at = parse(argv[1]), target = parse(argv[2]);
  g_delay_ns = long(std::atof(argv[3]) * 1000);
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ls, reinterpret_cast<const sockaddr*>(&listen_at), sizeof listen_at) != 0 || listen(ls, 64) != 0) {
    std::fprintf(stderr, "delay_relay: cannot listen on %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  for (;;) {
    const int a = accept(ls, nullptr, nullptr);
    if (a < 0) continue;
    std::thread([a, target] {
      const int b = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(b, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0) {
        close(a);
        close(b);
        return;
      }
      nodelay(a);
      nodelay(b);
      std::thread back(pump, b, a);
      pump(a, b);
      back.join();
      close(a);
      close(b);
    }).detach();
  }
}
