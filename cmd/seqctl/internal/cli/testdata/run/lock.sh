#!/bin/sh
# Exec handler of the seqctl run end-to-end tests (cmd/seqctl/e2e).
#
# It takes a per-key lock with mkdir (atomic: it fails when the directory exists), so a
# second event of the same key running at the same time, on any instance, is recorded as
# a violation and fails loudly. Holding the lock, it appends "KEY SEQ" to $SEQTEST_DIR/log
# (SEQ is the payload's "seq" field, read from the envelope on stdin), notes whether
# another key's lock was held at the same time (overlap across keys), sleeps a little so
# overlaps can happen, and releases the lock. Only mkdir, rmdir and sleep are forked.
#
# Environment: SEQTEST_DIR (the test's directory, with a locks/ subdirectory),
# SEQTEST_SLEEP (seconds to hold the lock, default 0.02), and the SEQ_* variables seqctl
# sets.
set -u
dir="$SEQTEST_DIR"
lock="$dir/locks/$SEQ_KEY"
if ! mkdir "$lock" 2>/dev/null; then
	echo "$SEQ_KEY $SEQ_EVENT_ID generation=$SEQ_GENERATION attempt=$SEQ_ATTEMPT" >>"$dir/violations"
	echo "per-key lock for $SEQ_KEY is already held: two events of one key overlap" >&2
	exit 1
fi
IFS= read -r body || true
seq=${body#*\"seq\":}
seq=${seq%%[!0-9]*}
if [ -z "$seq" ]; then
	# A truncated envelope (its writer died mid-write): refuse it, write nothing.
	rmdir "$lock"
	echo "no seq in the envelope on stdin" >&2
	exit 2
fi
set -- "$dir"/locks/*
if [ "$#" -gt 1 ]; then
	echo "$SEQ_KEY" >>"$dir/overlap"
fi
case "$SEQ_KEY" in
poison*)
	rmdir "$lock"
	echo "poison event $SEQ_EVENT_ID refused (attempt $SEQ_ATTEMPT)" >&2
	exit 3
	;;
esac
sleep "${SEQTEST_SLEEP:-0.02}"
echo "$SEQ_KEY $seq" >>"$dir/log"
rmdir "$lock"
