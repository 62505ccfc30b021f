// mpi_transport.h: the Transport over MPI (--transport mpi): the ranks of MPI_COMM_WORLD,
// started by mpirun or srun, are the cluster's nodes; rank 0 is the root. No addresses,
// no mesh bootstrap: MPI forms the mesh. Each message is one MPI message on a private
// duplicate of MPI_COMM_WORLD, its tag the MessageType; MPI's non-overtaking rule keeps
// each (sender, receiver) pair a FIFO. Every call polls (MPI_Test, MPI_Improbe) with the
// caller's timeout, so no call blocks inside MPI.
// Thread level: MPI_THREAD_SERIALIZED at least (MULTIPLE is asked for and used when given;
// a library that offers less is refused with a message): the root calls the transport
// from its engine thread, and while streaming weights from one thread per worker; every
// MPI call is made under the transport's mutex, and none blocks, so the calls interleave.
// Progress: OpenMPI progresses messages only inside MPI calls; ours poll while waiting
// (yield, then short sleeps), and a node computing makes none. Sends complete before
// send() returns (as TCP's block when the socket buffer is full), so nothing is left to
// progress during compute.
// mpi_start also runs the hello (the TCP handshake's checks, over MPI): protocol version
// and, when a cluster key is given, a mutual HMAC proof of it; a mismatch fails on both
// sides naming the rank. Then it measures MPI_Allreduce (native_sum_us) the same way on
// every rank. Links are not encrypted: the MPI fabric is the cluster's own.
// Deliberately no recovery: a dead rank ends the job (mpirun aborts it, naming the rank).
// After a failed call (a timeout) sends of it may still be posted: the cluster does not
// use the transport for steps again, and the job is meant to end.
// A build without MPI (SHARDLM_MPI off) keeps these functions; mpi_start then fails
// saying how to build with MPI.
#pragma once
#include <memory>
#include <string>

#include "net/transport.h"

namespace net {

// Whether this build has MPI.
bool mpi_built();
// Whether the environment says this process was started by mpirun or srun.
bool mpi_launched();
// This process's rank as mpirun or srun's environment gives it (before MPI is started);
// -1 when not started by them.
int mpi_env_rank();

struct MpiOptions {
  std::string cluster_key;                 // empty: none (must then be empty on every rank)
  std::string software_version = "unknown";
  double setup_timeout_s = 60;             // the hello
  double spin_us = 100;                    // busy-poll before sleeping; SHARDLM_SPIN_US overrides
};

// Initializes MPI and forms the transport over every rank; every rank calls it once. Fails
// (with how to start it) without MPI in the build, outside mpirun/srun, or on one rank.
Expected<std::unique_ptr<Transport>> mpi_start(const MpiOptions& o);
// Ends MPI in this process: MPI_Finalize after rc == 0, else MPI_Abort (every rank ends,
// none waits for a root that gave up). No-op when MPI was never started.
void mpi_end(int rc);

}  // namespace net
