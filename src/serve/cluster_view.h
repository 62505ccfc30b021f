// cluster_view.h: the cluster, live: GET /cluster's JSON (each node's name and address,
// device, share, memory held, state, and its counters as /metrics has them - compute and
// sync seconds, bytes sent and received, steps - with the per-step averages the page and
// `shardlm status` show; the cluster's node counts, recoveries and the latest recovery's
// report), and the terminal table `shardlm status` prints from it.
// Deliberately no HTTP here: server.cc serves the JSON, cli/status.cc fetches it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "serve/engine.h"

namespace serve {

// healthy: the engine can still serve (Engine::health()).
nlohmann::json cluster_json(const EngineMetrics& m, const ClusterInfo& info, bool healthy);
// cluster_json's object as a table, one node a line; throws nothing (fields missing or of
// another type print as "-").
std::string cluster_table(const nlohmann::json& j);

}  // namespace serve
