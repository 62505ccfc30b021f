// harmony.h: a gpt-oss reply in OpenAI's harmony format split into its thought and its
// answer, as llama-server's gpt-oss parser (common/parsers/gpt-oss.cpp) does. The prompt
// ends with <|start|>assistant; the reply is a run of messages
//   <|channel|>analysis<|message|>...thought...<|end|><|start|>assistant
//   <|channel|>final<|message|>...answer...
// Our detokenizer renders <|channel|>, <|message|>, <|start|> and <|constrain|> (as
// llama.cpp's vocab does) but drops <|end|> (a control token), so a message also ends
// where <|start|> begins the next one. The analysis channel's messages are the reasoning
// (each message's text, concatenated, kept as written); a final message is the content to
// the end; a commentary message (a preamble) is content. A stray "<|channel|>commentary
// to=assistant" before a channel is skipped, as llama.cpp does. A reply that does not start
// with <|channel|> (or <|start|>) is all content; an analysis message never ended
// (max_tokens) is all reasoning. Markup left undecided at the end is content when no
// message came before it, else dropped.
// Tool calls (when the request has tools): a message to a function, its recipient in the
// channel header (<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>) or
// in the role header (<|start|>assistant to=functions.NAME<|channel|>commentary json
// <|message|>, which the reply may also start with, right after the prompt's
// <|start|>assistant), is a call: its body (the arguments) goes out as calls text in
// Hermes form (tools.h: harmony_call_open ... kHarmonyCallClose), up to <|call|> (which
// ends the reply), <|end|> or <|start|>. Without tools such a message is content.
// Reasoning tokens: the tokens from an analysis message's <|channel|> through the token
// that ends it (the dropped <|end|> and the next <|start|> count), counted by the pieces of
// text they came in as ReasoningSplitter counts (reasoning.h).
#pragma once
#include <string>

namespace serve {

struct ReasoningPiece;

class HarmonySplitter {
 public:
  explicit HarmonySplitter(bool tools = false) : tools_(tools) {}
  void count(int n) { uncounted_ += n; }
  ReasoningPiece push(const std::string& text);
  ReasoningPiece finish();
  int reasoning_tokens() const { return reasoning_tokens_; }

 private:
  enum State { kBetween, kHeader, kAnalysis, kCommentary, kFinal, kPlain, kCall };
  void run(ReasoningPiece* out);
  // One state's step of run: true when the state changed or more can be read at once.
  bool between();
  bool header(ReasoningPiece* out);
  bool call(ReasoningPiece* out);
  bool message(ReasoningPiece* out);
  bool tools_;
  State state_ = kBetween;
  std::string recipient_;  // from the role header of the message being read
  std::string held_;
  bool seen_ = false;             // a message header was read
  bool entered_analysis_ = false;  // this push began an analysis message
  int uncounted_ = 0, undecided_ = 0, reasoning_tokens_ = 0;
};

// The rendered prompt ends with <|start|>assistant (white space after it allowed): a
// harmony (gpt-oss) reply follows.
bool ends_in_harmony_start(const std::string& prompt_tail);

}  // namespace serve
