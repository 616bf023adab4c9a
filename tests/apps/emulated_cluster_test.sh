#!/bin/bash
# scripts/emulated_cluster beside another cluster that holds the names its
# own process ID would give it (bb<PID % 200 + 20>…: the bridge and the host
# namespaces). It used to take those names regardless: `ip link add` failed,
# and its teardown then deleted the other cluster's bridge and namespaces.
# Now: it takes free names, runs its command, leaves the other cluster as it
# was, and removes everything it created itself. And its hosts are reached
# over ssh: a rank sees its host's name and sshd's environment, none of the
# starter's.
#   emulated_cluster_test.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/emulated_cluster"
[ "$(id -u)" = 0 ] || { echo "FAIL: needs root (network namespaces); CI runs as root"; exit 1; }
log=$(mktemp)
other=""
cleanup() {
  [ -n "$other" ] || return 0
  ip netns del "${other}h0" 2>/dev/null
  ip netns del "${other}h1" 2>/dev/null
  ip link del "${other}br" 2>/dev/null
  rm -f "$log"
}
fail() { echo "FAIL: $*"; cat "$log"; cleanup; exit 1; }

# The cluster's shell keeps the subshell's PID through exec: its $$ is $!.
# It starts once the other cluster's names exist (a state, not a time: the
# subshell waits on a pipe the test writes to after creating them).
go=$(mktemp -u)
mkfifo "$go"
( read -r _ <"$go"; exec "$cluster" --hosts 2 -- true ) >"$log" 2>&1 &
pid=$!
other="bb$(( pid % 200 + 20 ))"
ip link add "${other}br" type bridge || { echo go >"$go"; fail "could not create the other cluster's bridge"; }
ip netns add "${other}h0" && ip netns add "${other}h1" || { echo go >"$go"; fail "could not create its namespaces"; }
echo go >"$go"
rm -f "$go"
wait "$pid"
rc=$?
cat "$log"
[ "$rc" -eq 0 ] || fail "the cluster beside another exited $rc"
ip link show "${other}br" >/dev/null 2>&1 || fail "it deleted the other cluster's bridge ${other}br"
for h in 0 1; do
  ip netns list | grep -q "^${other}h$h\b" || fail "it deleted the other cluster's namespace ${other}h$h"
done
mine=$(sed -n 's/.*this cluster is \(bb[0-9]*\)….*/\1/p' "$log")
[ -n "$mine" ] && [ "$mine" != "$other" ] || fail "it did not say which other names it took"
ip link show "${mine}br" >/dev/null 2>&1 && fail "its own bridge ${mine}br outlived it"
ip netns list | grep -q "^${mine}h" && fail "its own namespaces outlived it"
cleanup

# The hosts are reached over ssh, as a real cluster's are: each rank runs
# on its own host (its hostname), with sshd's environment — a variable of
# the starter's does not arrive (ip netns exec would have handed it over) —
# and no sshd or namespace of the cluster outlives it.
log=$(mktemp)
BIGBATCH_TEST_MARK=starter "$cluster" --hosts 2 -- /bin/sh -c \
  'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname) mark=[${BIGBATCH_TEST_MARK:-}] ssh=[${SSH_CONNECTION:+yes}]"' \
  >"$log" 2>&1 || fail "a command on the ssh cluster failed"
cat "$log"
prefix=$(sed -n 's/^  host 0: namespace \(bb[0-9]*\)h0,.*/\1/p' "$log")
for r in 0 1; do
  grep -q "^rank $r on ${prefix}h$r mark=\[\] ssh=\[yes\]$" "$log" ||
    fail "rank $r did not run over ssh on host $r without the starter's environment"
done
ip netns list | grep -q "^${prefix}h" && fail "the ssh cluster's namespaces outlived it"
pgrep -f "sshd.*ListenAddress=10\.213\.${prefix#bb}\." >/dev/null && fail "an sshd of the cluster outlived it"
rm -f "$log"
echo "emulated_cluster_test: ok"
