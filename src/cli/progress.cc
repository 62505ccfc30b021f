// progress.cc: drawing the weight streams' progress (progress.h).
#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "util/timer.h"

namespace cli {

namespace {

std::string line(const runtime::WeightStream& p) {
  if (p.failed) return "weights to " + p.peer + ": stopped after " + std::to_string(p.sent / 1000000) + " MB";
  const double s = p.seconds, sent = double(p.sent), total = double(p.total);
  const double mbs = s > 0 ? sent / s / 1e6 : 0;
  const double eta = sent > 0 && mbs > 0 ? (total - sent) / 1e6 / mbs : 0;  // 0 until data flows
  char buf[256];
  std::snprintf(buf, sizeof buf, "weights to %s: %.1f / %.1f MB, %.1f MB/s, %s %.1f s", p.peer.c_str(), sent / 1e6,
                total / 1e6, mbs, p.done ? "took" : "ETA", p.done ? s : eta);
  return buf;
}

// One forming's drawing; reset when its streams are all done.
struct Drawing {
  bool tty = ::isatty(STDERR_FILENO);
  int drawn = 0;  // lines drawn on a terminal, redrawn in place
  std::vector<bool> reported;
  std::unique_ptr<util::Timer> since_draw;  // null: nothing drawn yet
};

}  // namespace

runtime::WeightProgress weight_progress_printer() {
  auto d = std::make_shared<Drawing>();
  return [d](const std::vector<runtime::WeightStream>& streams, bool final) {
    if (d->tty) {  // one line per worker, redrawn
      if (!final && d->since_draw && d->since_draw->seconds() < 0.2) return;
      if (d->drawn) std::fprintf(stderr, "\x1b[%dA", d->drawn);
      d->drawn = 0;
      for (const runtime::WeightStream& p : streams) {
        std::fprintf(stderr, "\r\x1b[K%s\n", line(p).c_str());
        ++d->drawn;
      }
      d->since_draw = std::make_unique<util::Timer>();
    } else {  // a log: one line per worker when it is done
      d->reported.resize(streams.size(), false);
      for (size_t i = 0; i < streams.size(); ++i)
        if (streams[i].done && !d->reported[i]) {
          std::fprintf(stderr, "%s\n", line(streams[i]).c_str());
          d->reported[i] = true;
        }
    }
    if (final) *d = Drawing();
  };
}

}  // namespace cli
