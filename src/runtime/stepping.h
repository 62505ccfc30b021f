// stepping.h: the root's step apart from its I/O (Cluster::run, cluster.cc): a step built
// from the sequences' rows (runtime/protocol.h's Step: per segment slot, position and
// what to return, with each sampled sequence's penalties, logit bias and token mask),
// checked as a worker checks the step it receives (step_fit), and the nodes' replies
// merged into the sequences' results: per sampled row every node's candidates drawn with
// the sequence's sampler (drafts kept while each equals the token drawn before it), per
// scored row the nodes' pieces combined.
// Deliberately no I/O and no state: Cluster::execute moves the step (stepping.cc).
#pragma once
#include <vector>

#include "runtime/cluster.h"

namespace runtime {

// Why a step failed, with what to do (with workers: check them; one node: start again).
util::Status step_failed(const util::Status& st, bool workers = true);

// The step of batch (Cluster::run's contract); *tokens: its rows' tokens in order.
util::Expected<Step> build_step(const std::vector<Cluster::SeqStep>& batch, const model::Config& cfg, int ctx,
                                int n_slots, int max_rows, std::vector<int32_t>* tokens);

// The sequences' results from the root's reply (mine) and the workers' (their candidate
// lists are moved out).
util::Expected<std::vector<Cluster::SeqResult>> merge_step(const std::vector<Cluster::SeqStep>& batch, const Step& s,
                                                           StepReply& mine, std::vector<StepReply>& replies);

}  // namespace runtime
