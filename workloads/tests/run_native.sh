#!/bin/sh
# Build the workloads into a temp dir and run each natively with tiny
# parameters, checking the exit status and the stdout contract:
#   lines are "row k=v ...", "result k=v ..." (exactly one, last) or "# ...";
#   keys snake_case; values integers/decimals (only what= may be a word);
#   result has ops= and time_us=.
# Also checks --help, that bad usage exits 2, runtime failures exit 1, and
# that churn cleans up (temp dir, processes) on normal exit and SIGTERM.
#
# Usage: tests/run_native.sh      (exit status 0 iff everything passed)
set -u

WL=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d /tmp/workloads-test.XXXXXX)
OUT=$TMP/bin
PASS=0
FAIL=0
trap 'rm -rf "$TMP"' EXIT

ok()   { PASS=$((PASS + 1)); echo "ok    $*"; }
bad()  { FAIL=$((FAIL + 1)); echo "FAIL  $*"; }

if ! make -s -C "$WL" OUT="$OUT" >"$TMP/build.log" 2>&1; then
	cat "$TMP/build.log"
	echo "build failed"
	echo "0 passed, 1 failed"
	exit 1
fi
if [ -s "$TMP/build.log" ]; then
	bad "build produced output (warnings?):"; cat "$TMP/build.log"
else
	ok "build"
fi

# check_contract FILE: every stdout line follows the contract.
check_contract() {
	awk '
	/^# / { next }
	{
		if ($1 != "row" && $1 != "result") { print "bad kind: " $0; bad = 1; next }
		if ($1 == "result") nres++
		if (NF < 2) { print "no fields: " $0; bad = 1 }
		for (i = 2; i <= NF; i++) {
			if ($i !~ /^[a-z][a-z0-9_]*=/) { print "bad key: " $i; bad = 1; continue }
			v = substr($i, index($i, "=") + 1)
			k = substr($i, 1, index($i, "=") - 1)
			if (v ~ /^-?[0-9]+(\.[0-9]+)?$/) continue
			if ((k == "what" || k == "program") && v ~ /^[a-z0-9]+$/) continue
			print "bad value: " $i; bad = 1
		}
		last = $1
	}
	END {
		if (nres != 1) { print "expected exactly one result line, got " nres + 0; bad = 1 }
		if (last != "result") { print "last line is not the result"; bad = 1 }
		exit bad
	}' "$1"
}

# run NAME CMD...: must exit 0 and follow the contract.
run() {
	name=$1; shift
	"$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
	if [ $rc -ne 0 ]; then
		bad "$name: exit $rc"; sed 's/^/      /' "$TMP/err"; return
	fi
	last=$(tail -n 1 "$TMP/out")
	case $last in
	"result "*) ;;
	*) bad "$name: last line is not a result: $last"; return ;;
	esac
	case $last in
	*" ops="*" time_us="*) ;;
	*) bad "$name: result lacks ops= or time_us=: $last"; return ;;
	esac
	if ! msg=$(check_contract "$TMP/out"); then
		bad "$name: contract: $msg"; return
	fi
	ok "$name: $last"
}

# expect RC NAME CMD...: must exit RC, print nothing on stdout (unless
# RC is 0) and, for a failure, say something on stderr.
expect() {
	want=$1 name=$2; shift 2
	"$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
	if [ $rc -ne "$want" ]; then
		bad "$name: exit $rc, want $want"; return
	fi
	if [ "$want" -ne 0 ] && { [ -s "$TMP/out" ] || [ ! -s "$TMP/err" ]; }; then
		bad "$name: want empty stdout and a message on stderr"; return
	fi
	ok "$name: exit $rc: $(head -n 1 "$TMP/err")"
}

# --- hello ---------------------------------------------------------------
if [ "$("$OUT/hello")" = "Hello world" ]; then ok "hello"; else bad "hello"; fi

# --- --help of every program lists its options ---------------------------
for spec in \
	"forkbench n exec hello touch-mb warmup procs help" \
	"shloop bursts k gap-ms hello warmup help" \
	"ptfault threads ranges n dontneed help" \
	"ptcycle n warmup help" \
	"lat_proc what n warmup hello help" \
	"pagetable_bench min-kb max-kb n help" \
	"tlb_bench min-kb max-kb accesses seed help" \
	"churn duration rate tabs libs lib-kb heap-kb report warmup resident help" \
	"forkdirty tables ptes ptes-list n help" \
	"cpusuite program input-kb n help" \
	"tcpstream host port seconds chunk-kb help"
do
	set -- $spec
	prog=$1; shift
	if ! "$OUT/$prog" --help >"$TMP/help" 2>"$TMP/err"; then
		bad "$prog --help: non-zero exit"; continue
	fi
	got=$(sed -n 's/^  --\([a-z-]*\).*/\1/p' "$TMP/help" | tr '\n' ' ')
	if [ "$got" = "$* " ]; then ok "$prog --help: $got"; else bad "$prog --help: got '$got' want '$* '"; fi
done

# --- tiny runs ------------------------------------------------------------
run "forkbench" "$OUT/forkbench" --n 5
run "forkbench --exec" "$OUT/forkbench" --n 5 --exec --warmup 1
run "forkbench --touch-mb" "$OUT/forkbench" --n=5 --touch-mb=4
run "forkbench --procs" "$OUT/forkbench" --n 5 --procs 3 --warmup 1
run "shloop" "$OUT/shloop" --bursts 2 --k 3 --gap-ms 1 --warmup 1
run "ptfault" "$OUT/ptfault" --threads 3 --ranges 4 --n 3
run "ptfault" "$OUT/ptfault" --threads 3 --ranges 4 --n 3 --dontneed
run "ptcycle" "$OUT/ptcycle" --n 5 --warmup 1
for what in fork exec shell; do
	run "lat_proc $what" "$OUT/lat_proc" --what $what --n 5 --warmup 1
done
run "pagetable_bench" "$OUT/pagetable_bench" --max-kb 64 --n 2
run "tlb_bench" "$OUT/tlb_bench" --max-kb 64 --accesses 1000
run "forkdirty" "$OUT/forkdirty" --tables 4 --n 2
run "forkdirty --ptes" "$OUT/forkdirty" --tables 2 --ptes 512 --n 2
run "forkdirty --ptes-list" "$OUT/forkdirty" --tables 2 --ptes-list 1,3 --n 2

for prog in gzip sha256; do
	run "cpusuite $prog" "$OUT/cpusuite" --program $prog --input-kb 16 --n 2
done
if grep -c '^row run=' "$TMP/out" | grep -qx 2; then ok "cpusuite: a row per run"; else bad "cpusuite: rows"; fi

# tcpstream against a receiver on loopback that reads to EOF, then reports the bytes.
python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
c.close(); print(n, flush=True)
' >"$TMP/rx" &
rxpid=$!
i=0
while [ ! -s "$TMP/rx" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
port=$(head -n 1 "$TMP/rx")
run "tcpstream" "$OUT/tcpstream" --host 127.0.0.1 --port "$port" --seconds 1 --chunk-kb 16
sent=$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' "$TMP/out")
wait $rxpid
got=$(sed -n 2p "$TMP/rx")
if [ -n "$sent" ] && [ "$sent" = "$got" ]; then ok "tcpstream: receiver got all $got bytes"; else bad "tcpstream: sent '$sent', received '$got'"; fi

before=$(ls -d /tmp/churn.* 2>/dev/null)
run "churn" "$OUT/churn" --duration 2 --rate 600 --tabs 2 --report 1
if grep -q '^row t_s=' "$TMP/out"; then ok "churn --report rows"; else bad "churn --report: no rows"; fi
after=$(ls -d /tmp/churn.* 2>/dev/null)
if [ "$before" = "$after" ]; then ok "churn removed its temp dir"; else bad "churn left a temp dir"; fi

# --- bad usage: exit 2 ----------------------------------------------------
expect 2 "forkbench --bogus" "$OUT/forkbench" --bogus
expect 2 "forkbench --n abc" "$OUT/forkbench" --n abc
expect 2 "forkbench --n 0" "$OUT/forkbench" --n 0
expect 2 "forkbench --n -1" "$OUT/forkbench" --n -1
expect 2 "forkbench --n 5x" "$OUT/forkbench" --n 5x
expect 2 "forkbench --n (missing)" "$OUT/forkbench" --n
expect 2 "forkbench operand" "$OUT/forkbench" extra
expect 2 "forkbench --touch-mb 4097" "$OUT/forkbench" --touch-mb 4097
expect 2 "forkbench --exec --hello missing" "$OUT/forkbench" --exec --hello "$TMP/nonexistent"
expect 2 "forkbench --exec --hello non-executable" "$OUT/forkbench" --exec --hello /etc/passwd
mkdir "$TMP/alone" && cp "$OUT/forkbench" "$TMP/alone/"
expect 2 "forkbench --exec, no hello next to it" "$TMP/alone/forkbench" --exec --n 1
expect 2 "lat_proc --what nope" "$OUT/lat_proc" --what nope
expect 2 "tlb_bench --min-kb 6" "$OUT/tlb_bench" --min-kb 6
expect 2 "tlb_bench --accesses 0" "$OUT/tlb_bench" --accesses 0
expect 2 "pagetable_bench --max-kb < --min-kb" "$OUT/pagetable_bench" --min-kb 64 --max-kb 32
expect 2 "forkdirty --ptes 513" "$OUT/forkdirty" --ptes 513
expect 2 "forkdirty --ptes-list 2,,4" "$OUT/forkdirty" --ptes-list 2,,4
expect 2 "forkdirty --ptes + --ptes-list" "$OUT/forkdirty" --ptes 2 --ptes-list 2
expect 2 "churn --rate 0" "$OUT/churn" --rate 0
expect 2 "churn --tabs 257" "$OUT/churn" --tabs 257
expect 2 "churn --duration 1.5" "$OUT/churn" --duration 1.5
expect 2 "cpusuite --program gcc" "$OUT/cpusuite" --program gcc
expect 2 "cpusuite without --program" "$OUT/cpusuite" --n 1
expect 2 "tcpstream --host 1.2.3" "$OUT/tcpstream" --host 1.2.3 --port 5
expect 2 "tcpstream without --port" "$OUT/tcpstream" --host 127.0.0.1

# --- runtime failure: exit 1 ----------------------------------------------
printf '#!/bin/sh\nexit 3\n' >"$TMP/fail.sh" && chmod +x "$TMP/fail.sh"
expect 1 "forkbench --exec, child fails" "$OUT/forkbench" --exec --n 2 --hello "$TMP/fail.sh"
expect 1 "lat_proc --what shell, child fails" "$OUT/lat_proc" --what shell --n 2 --hello "$TMP/fail.sh"
expect 1 "shloop, a program of the script fails" "$OUT/shloop" --bursts 1 --k 3 --hello "$TMP/fail.sh"
# A resident killed during the run (the first child churn forks): churn must notice.
"$OUT/churn" --duration 3 --rate 60 --tabs 1 --resident 2 >"$TMP/out" 2>"$TMP/err" &
pid=$!
sleep 1
# ps pads PIDs to pid_max's width: a PID shorter than that (pid_max 32768, PID 7969 on
# 2026-11-27) comes with a leading space, which the grep below must not see.
first=$(ps -o pid= --ppid "$pid" | sort -n | head -n 1 | tr -d ' ')
kill -KILL $first 2>/dev/null
wait $pid
rc=$?
if [ $rc = 1 ] && grep -q "resident $first died: signal 9" "$TMP/err"; then ok "churn, a resident killed: exit 1"
else bad "churn, a resident killed: exit $rc, $(cat "$TMP/err")"; fi
expect 1 "tcpstream, connection refused" "$OUT/tcpstream" --host 127.0.0.1 --port 1 --seconds 1

# --- churn: SIGTERM cleans up ---------------------------------------------
"$OUT/churn" --duration 60 --rate 3000 --tabs 4 >"$TMP/out" 2>"$TMP/err" &
pid=$!
sleep 1
kill -TERM $pid
wait $pid 2>/dev/null	# dash reports "Terminated" otherwise
rc=$?
sleep 0.2
left=
for p in /proc/[0-9]*; do
	[ "$(readlink "$p/exe" 2>/dev/null)" = "$OUT/churn" ] && left="$left ${p#/proc/}"
done
after=$(ls -d /tmp/churn.* 2>/dev/null)
if [ $rc -eq 143 ] && [ -z "$left" ] && [ "$before" = "$after" ]; then
	ok "churn SIGTERM: exit 143, no processes or temp dir left"
else
	bad "churn SIGTERM: exit $rc, processes left:${left:- none}, temp dirs before/after: '$before' / '$after'"
	for p in $left; do kill -KILL "$p" 2>/dev/null; done
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
