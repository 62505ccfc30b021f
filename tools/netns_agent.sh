#!/bin/sh
# netns_agent.sh: OpenMPI's "ssh" for the namespace testbed (tools/netns_mpi.py). mpirun's
# rsh launcher calls it as `netns_agent.sh HOST CMD...` to start its daemon (orted) on HOST;
# HOST 10.77.0.K is testbed node K-1, namespace shl-n<K-1>. The command runs in that
# namespace, in a UTS namespace of its own whose host name is the namespace's, so that
# OpenMPI (and shardlm's messages) see one host per namespace.
#   mpirun --mca plm_rsh_agent tools/netns_agent.sh --host 10.77.0.1,10.77.0.2 ...
host=$1
shift
case $host in
  10.77.0.*) ns=shl-n$((${host##*.} - 1)) ;;
  *) echo "netns_agent.sh: $host is not a testbed address (10.77.0.K)" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"
