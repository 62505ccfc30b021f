// stop.h: stop strings matched across token boundaries. Generated text is pushed piece by
// piece; push() returns only text that can no longer be the start of a stop string, so a
// stop string is never shown to the client, even when it arrives split over several
// tokens. Deliberately byte-wise (the pushed text is whole UTF-8 characters, and a held
// suffix starts with a stop string's first byte, so what is released stays whole
// characters).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends text and returns what is safe to emit. Once a stop string has been seen,
  // stopped() is true, the returned text ends just before it, and later pushes return "".
  std::string push(std::string_view text);
  // The text held back as a possible stop-string prefix (call when generation ends).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string seen, or ""

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace serve
