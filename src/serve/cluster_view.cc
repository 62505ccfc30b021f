// cluster_view.cc: /cluster's JSON and its terminal table (see cluster_view.h).
#include "serve/cluster_view.h"

#include <cstdio>

namespace serve {

using nlohmann::json;

json cluster_json(const EngineMetrics& m, const ClusterInfo& info, bool healthy) {
  json nodes = json::array();
  for (const NodeInfo& n : info.nodes) {
    json node = {{"name", n.name},
                 {"address", n.name.rfind("worker ", 0) == 0 ? n.name.substr(7) : ""},
                 {"device", n.device.empty() ? json(nullptr) : json(n.device)},
                 // The root's link to it (the link probe's α; null: the root, or not probed).
                 {"link_latency_us", n.link_alpha_us >= 0 ? json(n.link_alpha_us) : json(nullptr)},
                 {"share", n.share},
                 {"memory_bytes", n.memory_bytes},
                 {"state", n.state}};
    // Counters (since the cluster was last formed), as /metrics exports them.
    for (size_t i = 0; i < m.sched.nodes.size(); ++i) {
      if (m.sched.nodes[i].name != n.name || n.state == "lost") continue;
      const runtime::NodeCounters& c = m.sched.nodes[i].counters;
      const double steps = double(c.steps);
      node["index"] = i;  // the node="" label of /metrics
      node["compute_seconds"] = c.compute_s;
      node["sync_seconds"] = c.sync_s;
      node["bytes_sent"] = c.bytes_sent;
      node["bytes_received"] = c.bytes_received;
      node["steps"] = c.steps;
      node["rows"] = c.rows;
      // Per step of the model (a decode step is one token per sequence in it) and per token
      // (a row of a step: a prompt token or a sequence's decoded token).
      const double rows = double(c.rows);
      node["compute_ms_per_step"] = steps > 0 ? 1e3 * c.compute_s / steps : 0.0;
      node["sync_ms_per_step"] = steps > 0 ? 1e3 * c.sync_s / steps : 0.0;
      node["bytes_per_step"] = steps > 0 ? double(c.bytes_sent + c.bytes_received) / steps : 0.0;
      node["compute_ms_per_token"] = rows > 0 ? 1e3 * c.compute_s / rows : 0.0;
      node["sync_ms_per_token"] = rows > 0 ? 1e3 * c.sync_s / rows : 0.0;
      node["bytes_per_token"] = rows > 0 ? double(c.bytes_sent + c.bytes_received) / rows : 0.0;
    }
    nodes.push_back(std::move(node));
  }
  const runtime::ClusterHealth& h = m.cluster;
  return json{{"status", !healthy ? "unavailable" : h.nodes < h.nodes_planned ? "degraded" : "ok"},
              {"summary", info.summary},
              {"nodes_now", h.nodes},
              {"nodes_planned", h.nodes_planned},
              {"recoveries", h.recoveries},
              {"workers_lost", h.lost},
              {"last_recovery", h.last_recovery.empty() ? json(nullptr) : json(h.last_recovery)},
              {"nodes", nodes}};
}

namespace {

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string num(const json& j, const char* key, const char* fmt, double scale = 1) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, it->get<double>() * scale);
  return buf;
}

}  // namespace

std::string cluster_table(const json& j) {
  if (!j.is_object()) return "not a /cluster answer\n";
  std::string s = "cluster " + text(j, "status") + ": " + text(j, "nodes_now") + " of " + text(j, "nodes_planned") +
                  " nodes, " + text(j, "recoveries") + " recoveries, " + text(j, "workers_lost") + " workers lost\n";
  if (j.contains("summary") && j["summary"].is_string()) s += "  " + j["summary"].get<std::string>() + "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-28s %-9s %6s %9s %9s %11s %11s %10s %10s %8s  %s\n", "node", "state", "share",
                "mem MiB", "link us", "compute ms", "sync ms", "sent MB", "recv MB", "tokens", "device");
  s += line;
  const auto nodes = j.find("nodes");
  if (nodes != j.end() && nodes->is_array())
    for (const json& n : *nodes) {
      if (!n.is_object()) continue;
      std::snprintf(line, sizeof line, "%-28s %-9s %6s %9s %9s %11s %11s %10s %10s %8s  %s\n",
                    text(n, "name").c_str(), text(n, "state").c_str(), num(n, "share", "%.3f").c_str(),
                    num(n, "memory_bytes", "%.1f", 1.0 / (1 << 20)).c_str(),
                    num(n, "link_latency_us", "%.1f").c_str(),
                    num(n, "compute_ms_per_token", "%.3f").c_str(), num(n, "sync_ms_per_token", "%.3f").c_str(),
                    num(n, "bytes_sent", "%.3f", 1e-6).c_str(), num(n, "bytes_received", "%.3f", 1e-6).c_str(),
                    text(n, "rows").c_str(), text(n, "device").c_str());
      s += line;
    }
  s += "(compute and sync: ms per token, a token being a row of a step: a prompt token or a sequence's decoded "
       "token; tokens: the rows the node computed; link us: the root's link latency alpha to the node, measured "
       "when the cluster formed)\n";
  if (j.contains("last_recovery") && j["last_recovery"].is_string())
    s += "last recovery: " + j["last_recovery"].get<std::string>() + "\n";
  return s;
}

}  // namespace serve
