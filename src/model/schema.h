// schema.h: the one table of a layer's tensors per architecture (issue 14): each row names
// a tensor ("blk.N." + name), its shape in config terms, how a node's share is cut from it,
// whether the architecture needs it, and where it lives in LayerWeights. Binding
// (weights.cc), slicing and the weight stream (runtime/slicer.cc) and the worker's checks
// read these rows; a new architecture adds rows, not code paths. Also the only place the
// tensor names are spelled: the global tensors' and a layer tensor's full name.
// Deliberately no I/O: the readers own files, sockets and error wording.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace model {

// A dimension in config terms.
enum class Dim : uint8_t { kDim, kQ, kKv, kFf, kHead, kExperts, kHeads };  // kHeads: one per query head
int64_t dim_of(Dim d, const Config& c);

// How a node's share is cut (DESIGN §3): replicated, rows of its query heads / KV heads /
// MLP range, or input columns of its heads / MLP range (the two reduce points; rows of
// NodeSlice::rows in exact mode).
// kHeadVals: one value per query head, the node's heads' (gpt-oss's attention sinks).
// kOutRows: a vector added to a reduce point's output before the nodes' parts meet (the
// experts' down biases of gpt-oss, added before each expert's weight): in exact mode the
// node's output rows, else the whole vector on the node holding the first MLP rows and none
// on the others, so it is added once.
enum class Cut : uint8_t { kWhole, kHeadRows, kKvRows, kFfRows, kHeadCols, kFfCols, kHeadVals, kOutRows };

// Whether a file must hold the tensor: `needed(config)`. A tensor that is not needed is
// still bound when present (as llama.cpp reads optional tensors).
// experts: n_expert stacked matrices (ggml ne = [cols, rows, n_expert]), held as one Matrix
// of n_expert * rows rows (expert e: rows [e * rows, (e + 1) * rows), model::expert()); the
// cut applies to every expert alike.
struct LayerTensor {
  const char* name;             // after "blk.N."
  bool matrix;                  // [rows][cols] matrix, else an F32 vector of `rows` values
  Dim rows, cols;               // cols: matrices only
  Cut cut;
  bool experts;
  bool (*needed)(const Config&);
  Matrix LayerWeights::*m;      // matrix rows
  Vector LayerWeights::*v;      // vector rows
};

// The rows of every supported architecture, in the weight stream's order (one table: the
// rows an architecture does not need are skipped when absent, see LayerTensor::needed).
std::span<const LayerTensor> layer_schema();

// The global tensors' names (GGUF's, as llama.cpp names them).
inline constexpr const char* kTokenEmbdName = "token_embd.weight";
inline constexpr const char* kOutputNormName = "output_norm.weight";
inline constexpr const char* kOutputName = "output.weight";  // absent: tied to the token embedding
inline constexpr const char* kRopeFreqsName = "rope_freqs.weight";
// A layer's tensors' names are this prefix, "blk.<layer>.", and their row's name.
inline std::string layer_prefix(int layer) { return "blk." + std::to_string(layer) + "."; }

}  // namespace model
