// assets.h: the web page's JavaScript libraries and style sheet, Debian's files embedded
// into the binary at build time (CMakeLists.txt names them; no build step, no network):
// marked (markdown, libjs-marked), DOMPurify (sanitising the HTML marked makes,
// node-dompurify) and highlight.js with its GitHub style (libjs-highlight.js). Served at
// /assets/<name> with the content type given here.
#pragma once
#include <string_view>

namespace serve {

struct Asset {
  const char* path;          // "/assets/marked.js"
  const char* content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
};

// Every embedded asset.
const Asset* assets_begin();
const Asset* assets_end();

}  // namespace serve
