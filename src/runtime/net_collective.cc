// net_collective.cc: (header-only adapter; this unit anchors the runtime library.)
#include "runtime/net_collective.h"
