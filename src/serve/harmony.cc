// harmony.cc: the gpt-oss harmony split (see harmony.h).
#include "serve/harmony.h"

#include <algorithm>
#include <string_view>

#include "serve/reasoning.h"
#include "serve/tools.h"

namespace serve {

namespace {

constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>", kStart = "<|start|>",
                           kEnd = "<|end|>", kCallTag = "<|call|>", kTo = " to=";

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// s is a proper prefix of tag (it may still become the tag).
bool prefix_of(std::string_view s, std::string_view tag) { return s.size() < tag.size() && starts_with(tag, s); }

// The length of the longest suffix of s that is a proper prefix of tag.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// The recipient named in a header (" to=functions.get_weather" -> "functions.get_weather").
std::string recipient_in(std::string_view header) {
  const size_t at = header.find(kTo);
  if (at == std::string_view::npos) return "";
  header.remove_prefix(at + kTo.size());
  return std::string(header.substr(0, header.find_first_of(" <\n")));
}

}  // namespace

bool ends_in_harmony_start(const std::string& tail) {
  constexpr std::string_view kAssistant = "<|start|>assistant";
  size_t end = tail.size();
  while (end > 0 && space(tail[end - 1])) --end;
  return end >= kAssistant.size() &&
         std::string_view(tail).substr(end - kAssistant.size(), kAssistant.size()) == kAssistant;
}

void HarmonySplitter::run(ReasoningPiece* out) {
  for (;;) {
    bool more = false;
    switch (state_) {
      case kBetween: more = between(); break;
      case kHeader: more = header(out); break;
      case kCall: more = call(out); break;
      case kAnalysis:
      case kCommentary: more = message(out); break;
      case kFinal:
      case kPlain:  // the rest is the answer
        out->content += held_;
        held_.clear();
        break;
    }
    if (!more) return;
  }
}

// Before a message: <|end|>, <|start|>role, then <|channel|>.
bool HarmonySplitter::between() {
  const std::string_view h = held_;
  if (starts_with(h, kEnd)) {
    held_.erase(0, kEnd.size());
    return true;
  }
  if (starts_with(h, kChannel)) {
    state_ = kHeader;
    return true;
  }
  // <|start|>role, or (tools) the reply's own role header " to=functions.NAME".
  if (starts_with(h, kStart) || (tools_ && starts_with(h, kTo))) {
    // The channel (or, for a recipient that wrote none, the message) after the role.
    const size_t at = std::min(h.find(kChannel), tools_ ? h.find(kMessage) : std::string_view::npos);
    if (at == std::string_view::npos) return false;  // the role, then the channel, to come
    recipient_ = recipient_in(h.substr(0, at));
    held_.erase(0, at);
    state_ = kHeader;
    return true;
  }
  if (h.empty() || prefix_of(h, kChannel) || prefix_of(h, kStart) || prefix_of(h, kEnd) ||
      (tools_ && prefix_of(h, kTo)))
    return false;
  state_ = kPlain;
  return true;
}

// <|channel|>NAME[ to=...][<|constrain|>...]<|message|>
bool HarmonySplitter::header(ReasoningPiece* out) {
  const std::string_view h = held_;
  const size_t at = h.find(kMessage);
  if (at == std::string_view::npos) return false;
  std::string_view header = h.substr(0, at);
  if (const size_t c = header.rfind(kChannel); c != std::string_view::npos)
    header.remove_prefix(c + kChannel.size());  // past a stray commentary
  const std::string_view name = header.substr(0, header.find_first_of(" <"));
  state_ = name == "analysis" ? kAnalysis : name == "final" ? kFinal : kCommentary;
  std::string to = recipient_in(header);
  if (to.empty()) to = recipient_;
  recipient_.clear();
  if (tools_ && to.rfind("functions.", 0) == 0) {
    state_ = kCall;
    out->calls += harmony_call_open(to.substr(10));
  }
  if (state_ == kAnalysis) entered_analysis_ = true;
  seen_ = true;
  held_.erase(0, at + kMessage.size());  // name is a view of held_: read it first
  return true;
}

// A call's arguments, to <|call|> (or <|end|>, <|start|>).
bool HarmonySplitter::call(ReasoningPiece* out) {
  const std::string_view h = held_;
  const size_t at = std::min({h.find(kEnd), h.find(kStart), h.find(kCallTag)});
  if (at != std::string_view::npos) {
    out->calls += held_.substr(0, at);
    out->calls += kHarmonyCallClose;
    held_.erase(0, starts_with(h.substr(at), kCallTag) ? at + kCallTag.size() : at);
    state_ = kBetween;
    return true;
  }
  const size_t keep = std::max({partial_tag(h, kEnd), partial_tag(h, kStart), partial_tag(h, kCallTag)});
  out->calls += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

// An analysis or commentary message, to <|end|> or the next <|start|>.
bool HarmonySplitter::message(ReasoningPiece* out) {
  const std::string_view h = held_;
  std::string& to = state_ == kAnalysis ? out->reasoning : out->content;
  const size_t at = std::min(h.find(kEnd), h.find(kStart));
  if (at != std::string_view::npos) {
    to += held_.substr(0, at);
    held_.erase(0, at);
    state_ = kBetween;
    return true;
  }
  const size_t keep = std::max(partial_tag(h, kEnd), partial_tag(h, kStart));
  to += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

ReasoningPiece HarmonySplitter::push(const std::string& text) {
  held_ += text;
  ReasoningPiece out;
  const State before = state_;
  entered_analysis_ = false;
  run(&out);
  if (before == kAnalysis) {
    reasoning_tokens_ += uncounted_;
  } else if (before == kBetween || before == kHeader) {
    undecided_ += uncounted_;
    if (entered_analysis_) reasoning_tokens_ += undecided_;
    if (state_ != kBetween && state_ != kHeader) undecided_ = 0;
  }
  uncounted_ = 0;
  return out;
}

ReasoningPiece HarmonySplitter::finish() {
  ReasoningPiece out;
  if (state_ == kAnalysis) {  // never ended: all of it is the thought
    reasoning_tokens_ += uncounted_;
    out.reasoning = std::move(held_);
  } else if (state_ == kCall) {  // cut short (max_tokens): the arguments as far as written
    out.calls = std::move(held_) + kHarmonyCallClose;
  } else if (state_ == kBetween || state_ == kHeader) {
    if (!seen_) out.content = std::move(held_);
  } else {
    out.content = std::move(held_);
  }
  held_.clear();
  return out;
}

}  // namespace serve
