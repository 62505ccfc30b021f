// generate.cc: `shardlm generate`: prompt in, generated text to stdout (streamed,
// UTF-8 safe), statistics to stderr (prompt and generation tokens/s separately).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"
#include "util/timer.h"

namespace cli {

Runner add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate text from a prompt");
  auto o = std::make_shared<RunOptions>();
  auto prompt = std::make_shared<std::string>();
  auto n_predict = std::make_shared<int>(128);
  auto s = std::make_shared<sampler::Params>();
  add_run_options(cmd, o.get());
  cmd->add_option("-p,--prompt", *prompt, "prompt text")->required();
  cmd->add_option("-n,--n-predict", *n_predict, "tokens to generate")->capture_default_str();
  add_sampler_options(cmd, s.get());
  return [=]() {
    auto m = model::load_model(o->model);
    if (!m) return fail(m.error());
    auto tok = tokenizer::Tokenizer::from_gguf(*(*m)->file);
    if (!tok) return fail(o->model + ": " + tok.error());
    const model::Config& cfg = (*m)->config;
    std::vector<int32_t> tokens = (*tok)->encode(*prompt, /*add_special=*/true, /*parse_special=*/true);
    if (tokens.empty()) return fail("the prompt is empty after tokenization");
    const int ctx = resolve_ctx(*o, cfg);
    if (static_cast<int>(tokens.size()) + *n_predict > ctx)
      return fail("prompt (" + std::to_string(tokens.size()) + " tokens) plus -n " + std::to_string(*n_predict) +
                  " exceeds the context of " + std::to_string(ctx) + "; raise --ctx or lower -n");
    util::ThreadPool pool(o->threads);
    model::Transformer tf(cfg, (*m)->weights, pool, ctx, o->kv_type, o->batch);
    sampler::Sampler smp(*s, cfg.n_vocab);
    std::vector<float> logits(cfg.n_vocab);

    util::Timer t_prompt;
    util::Status st = tf.forward(tokens.data(), static_cast<int>(tokens.size()), 0, logits.data());
    if (!st.ok()) return fail(st.message());
    const double prompt_s = t_prompt.seconds();

    tokenizer::StreamDecoder dec(**tok);
    util::Timer t_gen;
    int generated = 0;
    std::vector<int32_t> history = tokens;
    for (; generated < *n_predict; ++generated) {
      const int32_t next = smp.sample(logits.data(), history);
      if ((*tok)->is_eog(next)) break;
      history.push_back(next);
      const std::string text = dec.push(next);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      if (generated + 1 == *n_predict) { ++generated; break; }
      st = tf.forward(&next, 1, static_cast<int>(history.size()) - 1, logits.data());
      if (!st.ok()) return fail(st.message());
    }
    const std::string rest = dec.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    const double gen_s = t_gen.seconds();
    std::fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.2f tokens/s)\n", tokens.size(), prompt_s * 1e3,
                 tokens.size() / prompt_s);
    std::fprintf(stderr, "generation: %d tokens in %.1f ms (%.2f tokens/s)\n", generated, gen_s * 1e3,
                 generated > 0 ? generated / gen_s : 0.0);
    return 0;
  };
}

}  // namespace cli
