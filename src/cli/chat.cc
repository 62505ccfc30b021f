// chat.cc: `shardlm chat`: a terminal chat. Reads one user message per line, keeps the
// conversation, renders it with the model's chat template and streams each reply to
// stdout, followed by a newline. On a terminal the line is read with libedit: editing,
// the arrow keys, and a history kept in $SHARDLM_HISTORY (default ~/.shardlm_history); from
// a pipe, plain lines. Ctrl-C during a reply stops that reply (what was said stays in the
// conversation, marked " [stopped]" on stderr); at the prompt it ends the program, as do
// Ctrl-D and /quit. A reply cut off by -n is marked " [cut off at -n N tokens]" (stderr). /help lists the
// commands, /reset starts over and says so. The same engine as `serve` (KV prefix reuse
// makes each turn evaluate only the new messages). A reply's <think> thought (serve/reasoning.h,
// as `serve --reasoning-format auto` splits it) is shown before the answer, on a line of its
// own: dim (ANSI) when stdout is a terminal, else each of its lines marked "[thinking] "; the
// conversation keeps the reply as the model wrote it (the template decides what to show of it).
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "cli/backend.h"
#include "cli/commands.h"
#include "serve/reasoning.h"

namespace cli {

namespace {

// Lines from libedit on a terminal (with history), else from std::getline.
class LineReader {
 public:
  explicit LineReader(bool tty) : tty_(tty) {
    if (!tty_) return;
    if (const char* h = std::getenv("SHARDLM_HISTORY")) history_ = h;
    else if (const char* home = std::getenv("HOME")) history_ = std::string(home) + "/.shardlm_history";
    using_history();
    if (!history_.empty()) read_history(history_.c_str());
  }
  ~LineReader() {
    if (tty_ && !history_.empty()) history_truncate_file(history_.c_str(), 1000);
  }
  // False at end of input.
  bool read(std::string* line) {
    if (!tty_) return bool(std::getline(std::cin, *line));
    char* l = readline("> ");
    if (!l) return false;
    *line = l;
    std::free(l);
    if (line->find_first_not_of(" \t") != std::string::npos) {
      add_history(line->c_str());
      if (!history_.empty()) write_history(history_.c_str());  // Ctrl-C at the prompt ends without destructors
    }
    return true;
  }

 private:
  bool tty_;
  std::string history_;
};

std::atomic<bool> g_interrupted{false};

void on_interrupt(int) { g_interrupted = true; }

// While alive, SIGINT sets g_interrupted instead of ending the program.
class InterruptScope {
 public:
  InterruptScope() {
    g_interrupted = false;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~InterruptScope() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

// Writes a reply to stdout, its thought set apart (see the top of this file).
class ReplyPrinter {
 public:
  ReplyPrinter(bool forced_open, bool harmony, bool tty) : split_(forced_open, harmony), tty_(tty) {}
  void push(const std::string& t) { show(split_.push(t)); }
  void finish() {
    show(split_.finish());
    if (thinking_) end_thought();
  }

 private:
  void show(const serve::ReasoningPiece& p) {
    if (!p.reasoning.empty()) {
      if (!thinking_ && tty_) std::fputs("\033[2m", stdout);
      thinking_ = true;
      for (const char c : p.reasoning) {
        if (!tty_ && line_start_) std::fputs("[thinking] ", stdout);
        std::fputc(c, stdout);
        line_start_ = c == '\n';
      }
    }
    if (!p.content.empty()) {
      if (thinking_) end_thought();
      std::fwrite(p.content.data(), 1, p.content.size(), stdout);
    }
    std::fflush(stdout);
  }
  void end_thought() {
    std::fputs(tty_ ? "\033[0m\n" : "\n", stdout);
    thinking_ = false;
  }
  serve::ReasoningSplitter split_;
  bool tty_, thinking_ = false, line_start_ = true;
};

const char kHelp[] =
    "/help    this list\n"
    "/reset   start a new conversation (the --system message is kept)\n"
    "/quit    end (also Ctrl-D, or Ctrl-C at the prompt)\n"
    "Ctrl-C during a reply stops the reply; the up and down arrows recall earlier lines.\n";

// A /command line other than /quit: done here (true), or not a command (false).
bool chat_command(const std::string& line, std::vector<tokenizer::ChatMessage>& history, size_t base) {
  if (line == "/help") {
    std::fputs(kHelp, stderr);
    return true;
  }
  if (line == "/reset") {
    const size_t dropped = history.size() - base;
    history.resize(base);
    std::fprintf(stderr, "new conversation (%zu message%s dropped%s)\n", dropped, dropped == 1 ? "" : "s",
                 base ? ", the system message kept" : "");
    return true;
  }
  if (line.size() > 1 && line[0] == '/' && line.find(' ') == std::string::npos) {
    std::fprintf(stderr, "unknown command %s; /help lists the commands\n", line.c_str());
    return true;
  }
  return false;
}

// The reply to history (whose last message is the user's), streamed to stdout and added
// to history; a conversation that fills the context is refused (its last message taken
// back). A reply draws with *seed, then the next seed (a different draw each turn,
// reproducible from --seed). An error message that ends the chat, or "".
std::string reply_turn(Backend& b, std::vector<tokenizer::ChatMessage>& history, const sampler::Params& s,
                       uint64_t* seed, int n_predict) {
  auto tokens = b.prompts->chat(history);
  if (!tokens) return "the chat template refused the conversation: " + tokens.error();
  const int ctx = b.engine->ctx();
  const int room = ctx - int(tokens->size());
  if (room < 1) {
    std::fprintf(stderr, "error: the conversation (%zu tokens) fills the context of %d; /reset or raise --ctx\n",
                 tokens->size(), ctx);
    history.pop_back();
    return "";
  }
  serve::GenerationRequest g;
  g.prompt = std::move(*tokens);
  g.params = s;
  g.params.seed = (*seed)++;
  g.seed_given = true;
  g.max_tokens = std::min(n_predict, room);
  std::string reply;
  serve::GenerationResult r;
  const size_t tail = std::min<size_t>(g.prompt.size(), 24);
  const std::string prompt_end = b.prompts->tokenizer().decode({g.prompt.end() - tail, g.prompt.end()}, true);
  ReplyPrinter printer(serve::ends_in_open_think(prompt_end), serve::ends_in_harmony_start(prompt_end), isatty(1));
  {
    InterruptScope interrupts;
    r = b.engine->generate(g, [&](const std::string& t) {
      if (g_interrupted) return false;
      reply += t;
      printer.push(t);
      return true;
    });
  }
  printer.finish();
  if (!r.status.ok()) {
    std::fputc('\n', stdout);
    return r.status.message();
  }
  // Marks on stderr: the reply on stdout stays the model's text.
  if (r.finish_reason == "cancelled") std::fputs(" [stopped]", stderr);
  if (r.finish_reason == "length")
    std::fprintf(stderr, " [cut off at %s %d tokens]", g.max_tokens == n_predict ? "-n" : "the context of",
                 g.max_tokens == n_predict ? n_predict : ctx);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  history.push_back({"assistant", reply});
  return "";
}

}  // namespace

Command add_chat(CLI::App& app) {
  const ModelCommand m = add_model_command(app, "chat", "interactive chat in the terminal", Speculates::kYes);
  auto tmpl = std::make_shared<std::string>();
  auto system = std::make_shared<std::string>();
  auto n_predict = std::make_shared<int>(512);
  auto s = std::make_shared<sampler::Params>();
  add_chat_template_option(m.cmd, tmpl.get());
  m.cmd->add_option("--system", *system, "system message");
  m.cmd->add_option("-n,--n-predict", *n_predict, "most tokens per reply")->capture_default_str()->check(CLI::PositiveNumber);
  add_sampler_options(m.cmd, s.get());
  return m.command([=]() {
    Backend b;
    if (std::string e = open_backend(*m.run, *m.cluster, *m.spec, *tmpl, &b); !e.empty()) return fail(e);
    const bool tty = isatty(0);
    if (tty) std::fprintf(stderr, "chat with %s; /help lists the commands, Ctrl-C stops a reply\n", m.run->model.c_str());
    std::vector<tokenizer::ChatMessage> history;
    if (!system->empty()) history.push_back({"system", *system});
    const size_t base = history.size();
    uint64_t seed = run_seed(m.cmd, s->seed);
    LineReader reader(tty);
    std::string line;
    while (reader.read(&line)) {
      if (line == "/quit" || line == "/exit") break;
      if (chat_command(line, history, base)) continue;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      history.push_back({"user", line});
      if (std::string e = reply_turn(b, history, *s, &seed, *n_predict); !e.empty()) return fail(e);
    }
    if (tty) std::fputc('\n', stderr);
    return 0;
  });
}

}  // namespace cli
