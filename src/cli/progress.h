// progress.h: the weight-streaming progress a forming cluster reports
// (runtime::WeightProgress, runtime/forming.h), drawn on stderr: on a terminal one line
// per worker, redrawn in place every 200 ms; in a log one line per worker once it is done.
#pragma once
#include "runtime/forming.h"

namespace cli {

runtime::WeightProgress weight_progress_printer();

}  // namespace cli
