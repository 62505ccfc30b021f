// netem_switch.cc: an Ethernet switch in user space that adds a one-way latency and a link
// rate, for the network-namespace testbed on machines without `tc netem` (tools/netns_mpi.py).
// Unlike delay_relay (a TCP proxy to one port), it carries every packet between the
// namespaces, so it also delays programs that open their own ports (mpirun, OpenMPI's TCP
// BTL).
//   netem_switch DELAY_US MBIT NS[:IFNAME] ...      (NS "-": this process's own namespace)
// For each port it opens a tap device IFNAME (default eth0) in network namespace NS
// (/run/netns/NS), and prints "ready" once all are open; the caller then gives them
// addresses and sets them up. The devices vanish when the switch exits (SIGTERM).
// A frame of B bytes read from port s at time t for port d is written to d at
//   up   = max(t, up_free[s]) + B*8/rate           (s's upload)
//   down = max(up + DELAY, down_free[d]) + B*8/rate (d's download)
// so a link is a rate-limited uplink, a fixed propagation delay and a rate-limited downlink:
// what `tc tbf` on both veth ends plus netem delay gave. Frames that would wait more than
// 50 ms for the uplink are dropped (a switch's queue). Learning by source MAC; unknown and
// broadcast destinations go to every other port. One thread, ppoll with 1 ns timer slack;
// its wake-ups add ~10-50 us on an idle machine (more under load).
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <queue>
#include <string>
#include <vector>

namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int open_tap(const std::string& ns, const std::string& ifname) {
  int self = -1;
  if (ns != "-") {
    self = open("/proc/self/ns/net", O_RDONLY);
    const int target = open(("/run/netns/" + ns).c_str(), O_RDONLY);
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
      std::perror(("netem_switch: namespace " + ns).c_str());
      std::exit(1);
    }
    close(target);
  }
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
  if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
    std::perror(("netem_switch: tap " + ifname + " in " + ns).c_str());
    std::exit(1);
  }
  if (self >= 0) {
    setns(self, CLONE_NEWNET);
    close(self);
  }
  return fd;
}

struct Event {
  int64_t t;
  uint64_t seq;  // FIFO among equal times
  int port;
  std::vector<uint8_t> frame;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: netem_switch DELAY_US MBIT NS[:IFNAME] NS[:IFNAME] ...\n");
    return 2;
  }
  const int64_t delay_ns = int64_t(std::atof(argv[1]) * 1000);
  const double ns_per_byte = 8e3 / std::atof(argv[2]);  // MBIT: 1e6 bit/s
  std::vector<pollfd> fds;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t c = a.find(':');
    fds.push_back({open_tap(a.substr(0, c), c == std::string::npos ? "eth0" : a.substr(c + 1)), POLLIN, 0});
  }
  prctl(PR_SET_TIMERSLACK, 1UL);
  std::printf("ready\n");
  std::fflush(stdout);
  const size_t n = fds.size();
  std::vector<int64_t> up_free(n, 0), down_free(n, 0);
  std::map<uint64_t, int> mac_port;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q;
  uint64_t seq = 0, dropped = 0;
  std::vector<uint8_t> buf(65536 + 64);
  for (;;) {
    int64_t t = now_ns();
    while (!q.empty() && q.top().t <= t) {
      const Event& e = q.top();
      if (write(fds[size_t(e.port)].fd, e.frame.data(), e.frame.size()) < 0) ++dropped;  // full or down
      q.pop();
    }
    timespec to{}, *top = nullptr;
    if (!q.empty()) {
      const int64_t w = q.top().t - t;
      to.tv_sec = w / 1000000000;
      to.tv_nsec = w % 1000000000;
      top = &to;
    }
    if (ppoll(fds.data(), n, top, nullptr) < 0) continue;
    for (size_t s = 0; s < n; ++s) {
      if (!(fds[s].revents & POLLIN)) continue;
      for (;;) {
        const ssize_t len = read(fds[s].fd, buf.data(), buf.size());
        if (len < 14) break;
        t = now_ns();
        const int64_t ser = int64_t(double(len) * ns_per_byte);
        if (up_free[s] - t > 50000000) {
          ++dropped;
          continue;
        }
        up_free[s] = std::max(t, up_free[s]) + ser;
        uint64_t dst = 0, src = 0;
        std::memcpy(&dst, buf.data(), 6);
        std::memcpy(&src, buf.data() + 6, 6);
        mac_port[src] = int(s);
        auto it = (buf[0] & 1) ? mac_port.end() : mac_port.find(dst);
        for (size_t d = 0; d < n; ++d) {
          if (d == s || (it != mac_port.end() && size_t(it->second) != d)) continue;
          down_free[d] = std::max(up_free[s] + delay_ns, down_free[d]) + ser;
          q.push({down_free[d], seq++, int(d), std::vector<uint8_t>(buf.begin(), buf.begin() + len)});
        }
      }
    }
  }
}
