// slicer.h: cuts a node's share out of a whole model (DESIGN §3): from the full
// model::Weights and a plan::NodeSlice, the node's sliced model::Weights and its
// model::Partition. Row slices (wq, wk, wv, gate, up, output, qwen2 biases) are views into
// the source (pointer offsets, no copy). Column slices (wo, down) are copied into owned
// storage: block by block when [c0, c1) falls on the type's block boundaries, otherwise
// each row is dequantized and [c0, c1) re-quantized to plan::slice_type's result. In exact
// mode (NodeSlice::exact) wo and down are row views as well. An MoE layer's stacked experts
// are cut expert by expert (the same ranges in each) into one new contiguous buffer.
// Also: a plan::ModelShape from bound weights, and a walk over every tensor of a Weights
// by name (what the weight streamer sends and a worker rebuilds).
// Deliberately no I/O and no networking.
#pragma once
#include <functional>
#include <string>

#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "plan/plan.h"
#include "util/status.h"

namespace runtime {

// A node's part of the model, ready for a model::Transformer.
struct NodeModel {
  model::Weights weights;    // sliced; may point into the source Weights' memory
  model::Partition part;
};

// The shape the planner needs, with every matrix's type as bound.
plan::ModelShape shape_of(const model::Config& cfg, const model::Weights& w);

// The model::Partition of a plan slice.
model::Partition partition_of(const plan::NodeSlice& s);

// Rows [r0, r1) of m: a view.
model::Matrix slice_rows(const model::Matrix& m, int64_t r0, int64_t r1);
// Columns [c0, c1) of every row of m, copied into a new buffer appended to `storage`,
// stored as plan::slice_type(m.type, c0, c1).
model::Matrix slice_columns(const model::Matrix& m, int64_t c0, int64_t c1, model::Storage* storage);

// The node's weights. The token embedding is kept (as a view) only when s.holds_embedding.
// The result may point into `full` (and whatever memory full points into): keep it alive.
NodeModel slice_weights(const model::Config& cfg, const model::Weights& full, const plan::NodeSlice& s);

// Checks every tensor of a node's weights w has the shape slice s gives it (model/schema.h);
// the message names the first that does not.
util::Status check_slice(const model::Config& cfg, const plan::NodeSlice& s, const model::Weights& w);

// Every tensor of w in a fixed order: matrices (name, pointer) and F32 vectors (name,
// pointer). The token embedding is not visited. Used to stream and rebuild slices.
struct TensorVisitor {
  std::function<util::Status(const std::string& name, model::Matrix* m)> matrix;
  std::function<util::Status(const std::string& name, model::Vector* v)> vector;
};
util::Status visit_tensors(model::Weights& w, int n_layers, const TensorVisitor& v);

}  // namespace runtime
