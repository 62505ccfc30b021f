// reasoning.h: a reply's <think>...</think> (Qwen3, DeepSeek-R1 and their kin) split from
// its content, as llama-server's --reasoning-format does:
//   none             the thoughts stay in the content, tags and all;
//   deepseek / auto  the thoughts go to each API's reasoning field (OpenAI chat's
//                    reasoning_content, streamed as reasoning_content deltas; Anthropic's
//                    thinking blocks; a Responses reasoning item), the content is the rest;
//   deepseek-legacy  the content keeps the tags as none does, and the thoughts are also
//                    given as reasoning_content (not streamed).
// A reply thinks when it starts (after white space) with <think>, or when the prompt ends
// with <think> (a template that opens the thought itself: "forced open"); only that first
// block is split off. A thought never closed (max_tokens reached) is all reasoning. White
// space around the thought is dropped, as llama-server's parser does. Streamed, text is
// held only while it may still be the start of a tag (or trailing white space).
// Reasoning tokens (usage.completion_tokens_details.reasoning_tokens): the generated tokens
// from the one that opens the thought through the one that completes </think> (both tags
// count: the model spends them thinking; a forced-open thought starts at the first token);
// white space after </think> and the answer are not. Tokens are counted by the pieces of
// text they came in (count() before push()): a piece that starts inside the thought counts
// whole, so a piece held across the boundary (a stop string's prefix) counts as thought.
// A thought never closed is all reasoning tokens. Always <= completion_tokens.
// A gpt-oss reply (the prompt ends with <|start|>assistant) is split by its harmony channels
// instead (harmony.h): ReasoningSplitter(_, true) hands everything to a HarmonySplitter.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "serve/harmony.h"

namespace serve {

enum class ReasoningFormat { kNone, kAuto, kDeepseek, kDeepseekLegacy };

std::optional<ReasoningFormat> reasoning_format_from_name(const std::string& name);
const char* reasoning_format_name(ReasoningFormat f);
// Whether f splits thoughts off at all (everything but none).
inline bool splits(ReasoningFormat f) { return f != ReasoningFormat::kNone; }

// The rendered prompt ends with an open <think> (white space after it allowed).
bool ends_in_open_think(const std::string& prompt_tail);

struct ReasoningPiece {
  std::string reasoning, content;
  std::string calls;  // harmony with tools: the calls, as Hermes text (harmony.h)
};

class ReasoningSplitter {
 public:
  // harmony: the reply is gpt-oss's harmony format (forced_open is then ignored);
  // harmony_tools: its messages to functions are calls (ReasoningPiece::calls).
  explicit ReasoningSplitter(bool forced_open, bool harmony = false, bool harmony_tools = false)
      : state_(forced_open ? kThinking : kStart),
        harmony_(harmony ? std::make_unique<HarmonySplitter>(harmony_tools) : nullptr) {}
  // n more generated tokens behind the text of the next push (or of the end).
  void count(int n) {
    if (harmony_) harmony_->count(n);
    uncounted_ += n;
  }
  // What may be shown now of the text pushed so far.
  ReasoningPiece push(const std::string& text);
  // The end of the reply: what was held.
  ReasoningPiece finish();
  // The tokens counted so far that belong to the thought.
  int reasoning_tokens() const { return harmony_ ? harmony_->reasoning_tokens() : reasoning_tokens_; }

 private:
  enum State { kStart, kThinking, kAfter, kContent };
  void run(ReasoningPiece* out);
  State state_;
  std::string held_;
  bool reasoning_started_ = false, opened_ = false;  // opened_: <think> seen in the reply
  int uncounted_ = 0, undecided_ = 0, reasoning_tokens_ = 0;  // undecided_: before the thought may start
  std::unique_ptr<HarmonySplitter> harmony_;
};

// The whole reply split at once (what push + finish give).
ReasoningPiece split_reasoning(const std::string& text, bool forced_open, bool harmony = false);

}  // namespace serve
