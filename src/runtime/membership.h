// membership.h: how the root's recovery (Cluster, membership.cc) treats a failure: by its
// kind (util::Status::Code) and whether it blames one member (its rank), never by its text.
// membership.cc holds the rest of membership: which worker holds which place, losing a
// worker, a spare taking its place, a lost worker rejoining, and re-forming.
#pragma once
#include <cstdint>

#include "util/status.h"

namespace runtime {

// What recovery does about a failed attempt to form the cluster: kGiveUp when fewer nodes
// would not help (a node has too little memory); kPutOut when the member is there but
// refuses (another key, protocol or link setting, or it said why): it is not tried again
// automatically; else kLose: the member blamed, and every active one whose port no longer
// answers, are lost, and the cluster is formed without them.
enum class Remedy : uint8_t { kGiveUp, kPutOut, kLose };
Remedy remedy_for(const util::Status& st, bool blames_member);

}  // namespace runtime
