// infill.h: llama-server's POST /infill, the code completion editors' plug-ins call
// (llama.vscode, llama.vim, ...): input_prefix and input_suffix (required strings),
// input_extra ([{filename, text}] of other files), prompt (text after the FIM middle token)
// and /completion's sampling fields (n_predict, temperature, top_k, top_p, min_p, seed,
// stop, stream, repeat_penalty, ...). The prompt is laid out as llama-server lays it:
//   [<REPO>myproject\n][<FILE_SEP>{filename}\n{text}]...[<FILE_SEP>filename\n]
//   <FIM_PRE>{input_prefix}<FIM_SUF>{input_suffix}<FIM_MID>{prompt}
// (without the repo and file-separator tokens the extra chunks go first, each after a
// "\n\n--- snippet ---\n\n" line), BOS first when the vocabulary asks for it. The FIM
// tokens are found in the vocabulary by the names llama.cpp knows (Qwen2.5-Coder's
// <|fim_prefix|> family, StarCoder's <fim_prefix>, DeepSeek's, CodeLlama's <PRE>, ...);
// a model without prefix, suffix and middle tokens is refused by name (400
// not_supported_error). The reply is llama-server's /completion object ({content, stop,
// tokens_predicted, tokens_evaluated, prompt, stop_type, ...}), streamed as "data:" lines
// of {content, stop: false} and a last one with stop: true. Errors are llama-server's
// {"error": {"code": STATUS, "message", "type"}}. Departure: nothing is cut to fit a batch
// (llama-server keeps 3/4 of a batch of prefix); a prompt beyond the context is a 400.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/api.h"

namespace httplib {
class Server;
}
namespace tokenizer {
class Tokenizer;
}

namespace serve {

class Generator;

struct InfillRequest {
  Request completion;  // the sampling fields as parse_request checks them (kCompletion)
  std::string prefix, suffix, prompt;
  std::vector<std::pair<std::string, std::string>> extra;  // {filename, text}
};
std::optional<ApiError> parse_infill(std::string_view body, int ctx, const sampler::Params& defaults,
                                     InfillRequest* out);
nlohmann::json infill_error_json(const ApiError& e);

// A vocabulary's FIM tokens (-1: none), by name.
struct FimTokens {
  int32_t pre = -1, suf = -1, mid = -1, rep = -1, sep = -1;
  bool usable() const { return pre >= 0 && suf >= 0 && mid >= 0; }
};
FimTokens find_fim_tokens(const tokenizer::Tokenizer& tok);
// The prompt of r in llama-server's layout (see above); fim.usable().
std::vector<int32_t> infill_prompt(const tokenizer::Tokenizer& tok, const FimTokens& fim, const InfillRequest& r);

void add_infill_routes(httplib::Server& svr, const Generator& gen);

}  // namespace serve
