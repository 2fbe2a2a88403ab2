#!/usr/bin/env bash
# Overhead of the eBPF collector, measured in one run (root): loopback TCP throughput without and
# with the collector attached (ratio), the kernel's per-program run time per event
# (BPF_ENABLE_STATS, read from the collector's /metrics), and the collector's resident memory
# with 10,000 live flows in its maps. The throughput with the collector is measured as it is
# deployed, then again with --program-stats, which times every run and gives the per-program
# figures. Figures go to stdout; benches/README.md quotes them.
#
#   benches/collector-overhead.sh [SECONDS_PER_THROUGHPUT_RUN] [ROUNDS]
#
# With BEFORE_OBJECT=<another build of gryvia-ebpf/programs> (benches/program-cost.sh builds one
# from a git revision), each round also runs the collector with that object, in turn with the
# others, so the two builds are compared under the same conditions (its per-program cost is
# printed too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs="${1:-5}"
rounds="${2:-3}"
[[ "$(id -u)" == 0 ]] || { echo "needs root (loads eBPF programs)" >&2; exit 1; }
cargo build --release -q -p gryvia-collector -p gryvia-ebpf --bin gryvia-collector --bin gryvia-traffic
T=target/release/gryvia-traffic
C=target/release/gryvia-collector
addr=127.0.0.1:19199
gbit() { "$T" throughput --seconds "$secs" | sed -n 's/.*"gbitPerSecond":\([0-9.]*\).*/\1/p'; }

without=(); with=(); before=(); with_stats=(); before_stats=()
collector_pid=""
stop() { [[ -n "$collector_pid" ]] && kill "$collector_pid" 2>/dev/null && wait "$collector_pid" 2>/dev/null || true; collector_pid=""; }
trap stop EXIT
rm -f /tmp/gryvia-program-stats-with-*.txt /tmp/gryvia-program-stats-before-*.txt
# Starts the collector with the given flags and waits until it serves.
collector() {
  "$C" --node bench --no-kubernetes --interval 1 --metrics-addr "$addr" "$@" 2>/dev/null &
  collector_pid=$!
  for _ in $(seq 1 100); do curl -sf "http://$addr/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}
# measure PLAIN TIMED FILE [FLAG...]: the throughput with the collector as deployed (no per-run
# timing) onto the array PLAIN, then with --program-stats onto TIMED (the timing's own cost),
# whose per-program figures go to FILE.
measure() {
  local -n plain=$1 timed=$2
  local file=$3
  shift 3
  collector "$@"
  plain+=("$(gbit)")
  stop
  collector --program-stats "$@"
  timed+=("$(gbit)")
  sleep 1.5
  curl -sf "http://$addr/metrics" | grep -E '^gryvia_ebpf_program_(runs|run_time_nanoseconds)' > "$file"
  stop
}
for r in $(seq 1 "$rounds"); do
  without+=("$(gbit)")
  if [[ -n "${BEFORE_OBJECT:-}" ]]; then
    measure before before_stats "/tmp/gryvia-program-stats-before-$r.txt" --object "$BEFORE_OBJECT"
  fi
  measure with with_stats "/tmp/gryvia-program-stats-with-$r.txt"
done
echo "loopback TCP throughput, $rounds rounds of ${secs}s each (Gbit/s):"
echo "  without collector: ${without[*]}"
echo "  with collector:    ${with[*]}"
echo "  with collector --program-stats: ${with_stats[*]}"
if [[ -n "${BEFORE_OBJECT:-}" ]]; then
  echo "  with the collector and BEFORE_OBJECT: ${before[*]}"
  echo "  with the collector and BEFORE_OBJECT, --program-stats: ${before_stats[*]}"
fi
python3 - "${without[*]}" "${with[*]}" "${with_stats[*]}" "${before[*]}" "${before_stats[*]}" <<'PY'
import statistics, sys
a = statistics.median(float(x) for x in sys.argv[1].split())
def line(label, arg):
    if arg.strip():
        m = statistics.median(float(x) for x in arg.split())
        print(f"  {label}: median {m:.2f}, ratio with/without {m/a:.3f}")
print(f"  median without {a:.2f}")
line("with the collector", sys.argv[2])
line("with the collector --program-stats", sys.argv[3])
line("BEFORE_OBJECT", sys.argv[4])
line("BEFORE_OBJECT --program-stats", sys.argv[5])
PY
# The median over the rounds of each program's run time per run (each round starts a fresh
# collector, so its counters are that round's).
per_program() {
  python3 - "$@" <<'PY'
import re, statistics, sys
per = {}
for path in sys.argv[1:]:
    runs, ns = {}, {}
    for line in open(path):
        m = re.match(r'gryvia_ebpf_program_(runs|run_time_nanoseconds)\{program="([^"]+)"\} (\d+)', line)
        if m:
            (runs if m.group(1) == "runs" else ns)[m.group(2)] = int(m.group(3))
    for p, r in runs.items():
        if r:
            per.setdefault(p, []).append((ns.get(p, 0) / r, r))
for p in sorted(per):
    v = per[p]
    print(f"  {p:16s} {statistics.median(x for x, _ in v):8.1f} ns/run (median of {len(v)} rounds: "
          + ", ".join(f"{x:.0f}" for x, _ in v) + f"; {sum(r for _, r in v)} runs)")
PY
}
echo "per-program cost with the collector (kernel BPF stats, --program-stats):"
per_program /tmp/gryvia-program-stats-with-*.txt
if [[ -n "${BEFORE_OBJECT:-}" ]]; then
  echo "the same with BEFORE_OBJECT:"
  per_program /tmp/gryvia-program-stats-before-*.txt
fi

echo "collector resident memory with 10,000 live flows:"
"$C" --node bench --no-kubernetes --interval 2 --metrics-addr "$addr" 2>/dev/null &
collector_pid=$!
for _ in $(seq 1 100); do curl -sf "http://$addr/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
rss_idle=$(awk '/VmRSS/ {print $2}' "/proc/$collector_pid/status")
"$T" tcp --connections 5000 --bytes 200 --reply 100 >/dev/null &
traffic_pid=$!
flows=0
for _ in $(seq 1 20); do
  f=$(curl -sf "http://$addr/metrics" | awk '/^gryvia_flows_tracked / {print $2}')
  (( ${f:-0} > flows )) && flows=$f
  sleep 0.5
done
wait "$traffic_pid"
rss=$(awk '/VmRSS/ {print $2}' "/proc/$collector_pid/status")
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$collector_pid/status")
echo "  idle ${rss_idle} KiB; after 5,000 connections (10,000 flows: each has a client and a server side): ${rss} KiB (peak ${hwm} KiB); flows tracked: ${flows}"
stop
