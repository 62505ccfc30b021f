// keygen.cc: `shardlm keygen`: a random cluster key (32 bytes as 64 hex characters) on
// stdout, or in a new file of mode 0600 with --out (net/cluster_key.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "net/cluster_key.h"

namespace cli {

Command add_keygen(CLI::App& app) {
  auto* cmd = app.add_subcommand("keygen", "make a random cluster key for --cluster-key-file / $SHARDLM_CLUSTER_KEY");
  auto out = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  cmd->add_option("-o,--out", *out, "write the key to this new file (mode 0600) instead of stdout");
  cmd->add_flag("--force", *force, "replace the file given with --out if it exists");
  return [=]() {
    const std::string key = net::generate_cluster_key();
    if (out->empty()) {
      std::printf("%s\n", key.c_str());
      return 0;
    }
    if (util::Status st = net::write_key_file(*out, key, *force); !st.ok()) return fail(st.message());
    std::fprintf(stderr,
                 "wrote a cluster key to %s (mode 0600): copy it to every node and start `shardlm worker` and the "
                 "root with --cluster-key-file %s\n",
                 out->c_str(), out->c_str());
    return 0;
  };
}

}  // namespace cli
