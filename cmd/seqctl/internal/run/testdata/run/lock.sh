#!/bin/sh
# Exec handler of the seqctl run end-to-end tests (cmd/seqctl/e2e).
#
# It takes a per-key lock (an atomic rename of a directory holding its pid and lease
# generation), so a second event of the same key running at the same time, on any
# instance, is recorded as a violation and fails loudly. A lock left by a handler that was
# killed with its owner (dead pid, older generation) is taken over, as a fenced sink would. Holding the lock, it appends "KEY SEQ" to $SEQTEST_DIR/log
# (SEQ is the payload's "seq" field, read from the envelope on stdin), notes whether
# another key's lock was held at the same time (overlap across keys), sleeps a little so
# overlaps can happen, and releases the lock. Only mkdir, mv, cat, ps, rm and sleep are forked.
#
# Environment: SEQTEST_DIR (the test's directory, with a locks/ subdirectory),
# SEQTEST_SLEEP (seconds to hold the lock, default 0.02), and the SEQ_* variables seqctl
# sets.
set -u
dir="$SEQTEST_DIR"
lock="$dir/locks/$SEQ_KEY"
# The lock is a directory holding the holder's pid and lease generation, created under a
# hidden name and renamed into place (atomic; the rename fails when the lock exists).
tmp="$dir/locks/.$SEQ_KEY.$$"
mkdir "$tmp" && echo "$$" >"$tmp/pid" && echo "$SEQ_GENERATION" >"$tmp/gen"
if ! mv -T "$tmp" "$lock" 2>/dev/null; then
	held_pid=$(cat "$lock/pid" 2>/dev/null || echo 0)
	held_gen=$(cat "$lock/gen" 2>/dev/null || echo 0)
	# A holder that is dead and of an older generation was killed with its owner mid-event:
	# its lease is gone, so the new owner takes the lock over. Anything else is an overlap.
	# (A killed holder may linger as a zombie until it is reaped: that is dead too.)
	held_state=$(ps -o stat= -p "$held_pid" 2>/dev/null || true)
	case "$held_state" in "" | Z*) held_alive=no ;; *) held_alive=yes ;; esac
	if [ "$SEQ_GENERATION" -gt "$held_gen" ] && [ "$held_alive" = no ]; then
		rm -rf "$lock"
		mv -T "$tmp" "$lock" 2>/dev/null || { rm -rf "$tmp"; echo "lock race on $SEQ_KEY" >&2; exit 1; }
	else
		rm -rf "$tmp"
		echo "$SEQ_KEY $SEQ_EVENT_ID generation=$SEQ_GENERATION attempt=$SEQ_ATTEMPT held_by_gen=$held_gen held_pid=$held_pid $(ps -o pid=,ppid=,args= -p "$held_pid" 2>/dev/null | tr "\n" " ")" >>"$dir/violations"
		echo "per-key lock for $SEQ_KEY is already held: two events of one key overlap" >&2
		exit 1
	fi
fi
IFS= read -r body || true
seq=${body#*\"seq\":}
seq=${seq%%[!0-9]*}
if [ -z "$seq" ]; then
	# A truncated envelope (its writer died mid-write): refuse it, write nothing.
	rm -rf "$lock"
	echo "no seq in the envelope on stdin" >&2
	exit 2
fi
set -- "$dir"/locks/*
if [ "$#" -gt 1 ]; then
	echo "$SEQ_KEY" >>"$dir/overlap"
fi
case "$SEQ_KEY" in
poison*)
	rm -rf "$lock"
	echo "poison event $SEQ_EVENT_ID refused (attempt $SEQ_ATTEMPT)" >&2
	exit 3
	;;
esac
sleep "${SEQTEST_SLEEP:-0.02}"
echo "$SEQ_KEY $seq" >>"$dir/log"
rm -rf "$lock"
