// status.cc: `shardlm status URL` (or --url URL): the cluster of a running `shardlm serve`,
// as its web page's Cluster panel shows it: GET URL/cluster printed as a table
// (serve/cluster_view.h), one node a line. Exit 1 when the server cannot be reached or
// does not answer /cluster; 0 otherwise, also for a degraded cluster (the table says so).
#include <httplib.h>

#include <cstdio>

#include "cli/commands.h"
#include "serve/cluster_view.h"

namespace cli {

Command add_status(CLI::App& app) {
  auto* sub = app.add_subcommand("status", "print the cluster of a running `shardlm serve` (its /cluster) as a table");
  auto url = std::make_shared<std::string>();
  sub->add_option("url", *url, "the server, e.g. http://127.0.0.1:8080");
  sub->add_option("--url", *url, "the same, as an option");
  return [url]() {
    if (url->empty()) return fail("give the server's address: shardlm status http://HOST:PORT");
    std::string base = *url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    if (base.find("://") == std::string::npos) base = "http://" + base;
    httplib::Client client(base);
    if (!client.is_valid()) return fail("'" + *url + "' is not an address this build can reach (http://HOST:PORT)");
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    auto res = client.Get("/cluster");
    if (!res) return fail("cannot reach " + base + ": " + httplib::to_string(res.error()));
    if (res->status != 200)
      return fail(base + "/cluster answered HTTP " + std::to_string(res->status) + " (an older server, or not shardlm)");
    const auto j = nlohmann::json::parse(res->body, nullptr, false);
    if (!j.is_object()) return fail(base + "/cluster did not answer JSON");
    std::fputs(serve::cluster_table(j).c_str(), stdout);
    return 0;
  };
}

}  // namespace cli
