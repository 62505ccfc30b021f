// chat.cc: `shardlm chat`: a terminal chat. Reads one user message per line from stdin
// (interactive or piped), keeps the conversation, renders it with the model's chat
// template and streams each reply to stdout, followed by a newline. The same engine as
// `serve` (KV prefix reuse makes each turn evaluate only the new messages). "/reset"
// starts a new conversation; "/quit" or end of input ends.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/backend.h"
#include "cli/commands.h"

namespace cli {

Runner add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "interactive chat in the terminal");
  auto o = std::make_shared<RunOptions>();
  auto co = std::make_shared<ClusterCliOptions>();
  auto tmpl = std::make_shared<std::string>();
  auto system = std::make_shared<std::string>();
  auto n_predict = std::make_shared<int>(512);
  auto s = std::make_shared<sampler::Params>();
  add_run_options(cmd, o.get());
  add_cluster_options(cmd, co.get());
  add_chat_template_option(cmd, tmpl.get());
  cmd->add_option("--system", *system, "system message");
  cmd->add_option("-n,--n-predict", *n_predict, "most tokens per reply")->capture_default_str()->check(CLI::PositiveNumber);
  add_sampler_options(cmd, s.get());
  return [=]() {
    Backend b;
    if (std::string e = open_backend(*o, *co, *tmpl, &b); !e.empty()) return fail(e);
    const bool tty = isatty(0);
    if (tty) std::fprintf(stderr, "chat with %s; /reset starts over, /quit or Ctrl-D ends\n", o->model.c_str());
    std::vector<tokenizer::ChatMessage> history;
    if (!system->empty()) history.push_back({"system", *system});
    const size_t base = history.size();
    std::string line;
    for (;;) {
      if (tty) std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line)) break;
      if (line == "/quit") break;
      if (line == "/reset") {
        history.resize(base);
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      history.push_back({"user", line});
      auto tokens = b.prompts->chat(history);
      if (!tokens) return fail("the chat template refused the conversation: " + tokens.error());
      const int ctx = b.engine->ctx();
      const int room = ctx - int(tokens->size());
      if (room < 1) {
        std::fprintf(stderr, "error: the conversation (%zu tokens) fills the context of %d; /reset or raise --ctx\n",
                     tokens->size(), ctx);
        history.pop_back();
        continue;
      }
      serve::GenerationRequest g;
      g.prompt = std::move(*tokens);
      g.params = *s;
      g.seed_given = true;
      g.max_tokens = std::min(*n_predict, room);
      std::string reply;
      serve::GenerationResult r = b.engine->generate(g, [&](const std::string& t) {
        reply += t;
        std::fwrite(t.data(), 1, t.size(), stdout);
        std::fflush(stdout);
        return true;
      });
      std::fputc('\n', stdout);
      std::fflush(stdout);
      if (!r.status.ok()) return fail(r.status.message());
      history.push_back({"assistant", reply});
      s->seed++;  // a different draw each turn, still reproducible from --seed
    }
    return 0;
  };
}

}  // namespace cli
