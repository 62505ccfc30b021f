// reasoning.cc: the <think> split (see reasoning.h).
#include "serve/reasoning.h"

#include <string_view>

namespace serve {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t first_non_space(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && space(s[i])) ++i;
  return i;
}

// The length of the longest suffix of s that is a proper prefix of tag.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_from_name(const std::string& name) {
  if (name == "none") return ReasoningFormat::kNone;
  if (name == "auto") return ReasoningFormat::kAuto;
  if (name == "deepseek") return ReasoningFormat::kDeepseek;
  if (name == "deepseek-legacy") return ReasoningFormat::kDeepseekLegacy;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kNone: return "none";
    case ReasoningFormat::kDeepseek: return "deepseek";
    case ReasoningFormat::kDeepseekLegacy: return "deepseek-legacy";
    default: return "auto";
  }
}

bool ends_in_open_think(const std::string& tail) {
  size_t end = tail.size();
  while (end > 0 && space(tail[end - 1])) --end;
  return end >= kOpen.size() && std::string_view(tail).substr(end - kOpen.size(), kOpen.size()) == kOpen;
}

void ReasoningSplitter::run(ReasoningPiece* out) {
  for (;;) {
    if (state_ == kStart) {
      const std::string_view rest = std::string_view(held_).substr(first_non_space(held_));
      if (rest.size() >= kOpen.size() && rest.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, held_.size() - rest.size() + kOpen.size());
        state_ = kThinking;
        opened_ = true;
        continue;
      }
      if (rest.empty() || kOpen.substr(0, rest.size()) == rest) return;  // may still be <think>
      state_ = kContent;
      continue;
    }
    if (state_ == kThinking) {
      if (!reasoning_started_) {  // white space after <think> is dropped
        held_.erase(0, first_non_space(held_));
        if (held_.empty()) return;
        reasoning_started_ = true;
      }
      if (const size_t at = held_.find(kClose); at != std::string::npos) {
        size_t end = at;
        while (end > 0 && space(held_[end - 1])) --end;
        out->reasoning += held_.substr(0, end);
        held_.erase(0, at + kClose.size());
        state_ = kAfter;
        continue;
      }
      // Hold a possible start of </think>, and trailing white space (dropped if it ends the thought).
      size_t keep = partial_tag(held_, kClose);
      size_t end = held_.size() - keep;
      while (end > 0 && space(held_[end - 1])) --end;
      out->reasoning += held_.substr(0, end);
      held_.erase(0, end);
      return;
    }
    if (state_ == kAfter) {  // white space after </think> is dropped
      held_.erase(0, first_non_space(held_));
      if (held_.empty()) return;
      state_ = kContent;
      continue;
    }
    out->content += held_;
    held_.clear();
    return;
  }
}

ReasoningPiece ReasoningSplitter::push(const std::string& text) {
  if (harmony_) return harmony_->push(text);
  held_ += text;
  ReasoningPiece out;
  const State before = state_;
  run(&out);
  if (before == kThinking) {
    reasoning_tokens_ += uncounted_;
  } else if (before == kStart) {
    undecided_ += uncounted_;
    if (opened_) reasoning_tokens_ += undecided_;
    if (state_ != kStart) undecided_ = 0;
  }
  uncounted_ = 0;
  return out;
}

ReasoningPiece ReasoningSplitter::finish() {
  if (harmony_) return harmony_->finish();
  ReasoningPiece out;
  if (state_ == kStart) {
    out.content = std::move(held_);
  } else if (state_ == kThinking) {  // never closed: all of it is the thought
    reasoning_tokens_ += uncounted_;
    size_t end = held_.size();
    while (end > 0 && space(held_[end - 1])) --end;
    out.reasoning = held_.substr(0, end);
  }
  held_.clear();
  return out;
}

ReasoningPiece split_reasoning(const std::string& text, bool forced_open, bool harmony) {
  ReasoningSplitter s(forced_open, harmony);
  ReasoningPiece a = s.push(text), b = s.finish();
  return {a.reasoning + b.reasoning, a.content + b.content, a.calls + b.calls};
}

}  // namespace serve
