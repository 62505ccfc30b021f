// assets.cc: embeds the page's libraries with the assembler's .incbin (the paths come from
// CMakeLists.txt as SHARDLM_ASSET_* definitions; a changed file rebuilds this one).
#include "serve/assets.h"

// Defines <name>_begin / <name>_end around the file's bytes in .rodata.
#define SHARDLM_INCBIN(name, file)                                                    \
  asm(".section .rodata\n.balign 16\n.global " #name "_begin\n" #name "_begin:\n" \
      ".incbin \"" file "\"\n.global " #name "_end\n" #name "_end:\n.byte 0\n.previous\n")

SHARDLM_INCBIN(shardlm_asset_marked, SHARDLM_ASSET_MARKED);
SHARDLM_INCBIN(shardlm_asset_purify, SHARDLM_ASSET_PURIFY);
SHARDLM_INCBIN(shardlm_asset_hljs, SHARDLM_ASSET_HLJS);
SHARDLM_INCBIN(shardlm_asset_hljs_css, SHARDLM_ASSET_HLJS_CSS);

extern "C" {
extern const char shardlm_asset_marked_begin[], shardlm_asset_marked_end[];
extern const char shardlm_asset_purify_begin[], shardlm_asset_purify_end[];
extern const char shardlm_asset_hljs_begin[], shardlm_asset_hljs_end[];
extern const char shardlm_asset_hljs_css_begin[], shardlm_asset_hljs_css_end[];
}

namespace serve {

namespace {

std::string_view bytes(const char* b, const char* e) { return std::string_view(b, size_t(e - b)); }

const char kJs[] = "text/javascript; charset=utf-8";

const Asset kAssets[] = {
    {"/assets/marked.js", kJs, bytes(shardlm_asset_marked_begin, shardlm_asset_marked_end)},
    {"/assets/purify.js", kJs, bytes(shardlm_asset_purify_begin, shardlm_asset_purify_end)},
    {"/assets/highlight.js", kJs, bytes(shardlm_asset_hljs_begin, shardlm_asset_hljs_end)},
    {"/assets/highlight.css", "text/css; charset=utf-8", bytes(shardlm_asset_hljs_css_begin, shardlm_asset_hljs_css_end)},
};

}  // namespace

const Asset* assets_begin() { return std::begin(kAssets); }
const Asset* assets_end() { return std::end(kAssets); }

}  // namespace serve
