#!/usr/bin/env bash
# API requests per reconcile of the three operators, measured around one fixed scenario on a
# control plane of its own (testenv/ in a separate state dir and ports, stopped at the end):
# 6 tenants with a budget each, 24 one-GPU AI jobs, a 3-step workflow, a job hook with a
# receiver, a template, a priority tier, a future reservation and a GPU health check.
#
# For each operator it prints the reconciles it ran (`gryvia_reconciles_total`) and the
# requests it sent (`gryvia_api_requests_total`, by verb and resource), and for the whole run
# the API server's own `apiserver_request_total` delta (every client: the operators, the
# controller-manager, the scheduler, KWOK and this script, so compare it between runs of the
# same scenario, not on its own). benches/README.md quotes the figures.
#
#   benches/api-requests.sh [OUT_DIR] [BASE_REV]
#
# With BASE_REV (a commit that has the request counter, 9fe3653 or later) the same scenario
# runs first on that commit's binaries (built in a worktree of their own, into
# target/api-requests-base or $GRYVIA_BASE_TARGET_DIR), then on this tree's, in one invocation,
# and a table compares the two.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-/tmp/gryvia-api-requests}"
base="${2:-}"
mkdir -p "$out"
export GRYVIA_TESTENV_DIR=/tmp/gryvia-bench-env
export GRYVIA_TESTENV_APISERVER_PORT=17443 GRYVIA_TESTENV_ETCD_PORT=17379 \
  GRYVIA_TESTENV_KCM_PORT=17257 GRYVIA_TESTENV_SCHEDULER_PORT=17259 GRYVIA_TESTENV_KWOK_PORT=17247

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  testenv/down >/dev/null 2>&1 || true
}
trap cleanup EXIT

# measure BIN OUT: the scenario with the operators in BIN, figures into OUT.
measure() {
local BIN="$1" out="$2"
mkdir -p "$out"
testenv/down >/dev/null 2>&1 || true
eval "$(testenv/up --nodes 4 --gpus-per-node 8 | tail -n 1)"
source testenv/lib.sh
k() { "$(kubectl_bin)" "$@"; }
product="$(k get nodes -o jsonpath='{.items[0].metadata.labels.nvidia\.com/gpu\.product}')"
"$BIN/gryvia" install >/dev/null

k get --raw /metrics | grep '^apiserver_request_total' >"$out/apiserver-before.txt"
pids=()

start() { # start NAME PORT ARGS...
  local name="$1" port="$2"
  shift 2
  "$BIN/gryvia-$name" --no-leader-election --metrics-addr "127.0.0.1:$port" "$@" >"$out/$name.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 80); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return; sleep 0.25; done
  echo "$name did not become ready:" >&2; tail -n 20 "$out/$name.log" >&2; exit 1
}
start quota-operator 19181 --metering
start ai-operator 19182 --enable-reservations --enable-job-hooks
start gpu-operator 19183 --gpu-health

python3 - 19189 >"$out/receiver.log" 2>&1 <<'PY' &
import http.server, sys
class R(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), R).serve_forever()
PY
pids+=("$!")

tenants=(t0 t1 t2 t3 t4 t5)
{
  cat <<YAML
apiVersion: gryvia.io/v1alpha1
kind: GryviaGpuSku
metadata: {name: bench-gpu}
spec: {displayName: "bench GPU", gpuProduct: $product, pricePerGpuHour: "2.00"}
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaPriority
metadata: {name: bench-high}
spec: {value: 1000, description: "bench"}
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaTemplate
metadata: {name: bench-train}
spec:
  category: training
  defaults: {image: "registry.local/train:1", gpus: 1}
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaReservation
metadata: {name: bench-later}
spec:
  owner: {type: team, name: t0}
  resources: {gpuType: $product, gpuCount: 8}
  schedule: {type: immediate, startTime: "2099-01-01T00:00:00Z", endTime: "2099-01-02T00:00:00Z"}
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaHealthCheck
metadata: {name: bench-health}
spec:
  target: {type: cluster}
  schedule: "*/10 * * * * *"
  checks: [{name: temp, type: gpu-temperature, threshold: {max: 90}}]
YAML
  for t in "${tenants[@]}"; do
    cat <<YAML
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaTenant
metadata: {name: $t}
spec: {displayName: "$t", quotas: {concurrentGPUs: 16}}
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaBudget
metadata: {name: $t-monthly}
spec:
  scope: {type: tenant, name: $t}
  period: {type: monthly}
  limits: {costUSD: 100000}
YAML
  done
} | k apply -f - >/dev/null
for t in "${tenants[@]}"; do k wait --for=condition=Ready "gryviatenant/$t" --timeout=60s >/dev/null; done
k -n tenant-t0 create secret generic bench-hook --from-literal=secret=k >/dev/null
{
  cat <<YAML
apiVersion: gryvia.io/v1alpha1
kind: GryviaJobHook
metadata: {name: bench-hook, namespace: tenant-t0}
spec:
  events: [Started, Succeeded, Failed]
  selector: {includeWorkflows: true}
  url: http://127.0.0.1:19189/hook
  allowInsecure: true
  secretRef: {name: bench-hook}
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaWorkflow
metadata: {name: bench-flow, namespace: tenant-t0}
spec:
  steps:
    - {name: prep, job: {image: registry.local/prep:1, gpus: 1}}
    - {name: train, dependsOn: [prep], templateRef: {name: bench-train}}
    - {name: eval, dependsOn: [train], job: {image: registry.local/eval:1, gpus: 1}}
YAML
  for t in "${tenants[@]}"; do
    for i in 0 1 2 3; do
      cat <<YAML
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata: {name: job-$i, namespace: tenant-$t, annotations: {gryvia.io/priority-class: bench-high}}
spec: {image: registry.local/train:1, gpus: 1}
YAML
    done
  done
} | k apply -f - >/dev/null

finished() {
  k get gryviaaijobs -A -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -cE '^(Succeeded|Failed)$' || true
}
for _ in $(seq 1 240); do
  [[ "$(finished)" -ge 27 && "$(k -n tenant-t0 get gryviaworkflow bench-flow -o jsonpath='{.status.phase}')" == Succeeded ]] && break
  sleep 1
done
[[ "$(finished)" -ge 27 ]] || { echo "the jobs did not finish: $(finished) of 27" >&2; exit 1; }
sleep 20 # let the last status writes, hook deliveries and requeues settle

k get --raw /metrics | grep '^apiserver_request_total' >"$out/apiserver-after.txt"
for op in quota-operator:19181 ai-operator:19182 gpu-operator:19183; do
  curl -sf "http://127.0.0.1:${op#*:}/metrics" >"$out/${op%%:*}.metrics"
done

python3 - "$out" <<'PY'
import collections, re, sys
out = sys.argv[1]
line = re.compile(r'^(\w+)\{(.*)\} ([0-9.e+]+)$')
def parse(path):
    rows = []
    for l in open(path):
        m = line.match(l.strip())
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            rows.append((m.group(1), labels, float(m.group(3))))
    return rows
import json
summary = {}
total_req = total_rec = 0
for op in ["quota-operator", "ai-operator", "gpu-operator"]:
    rows = parse(f"{out}/{op}.metrics")
    rec = collections.Counter()
    req = collections.Counter()
    for name, labels, v in rows:
        if name == "gryvia_reconciles_total":
            rec[labels["controller"]] += v
        if name == "gryvia_api_requests_total":
            req[(labels["verb"], labels["resource"])] += v
    r, q = sum(rec.values()), sum(req.values())
    total_req += q; total_rec += r
    summary[op] = {"requests": int(q), "reconciles": int(r)}
    print(f"{op}: {int(r)} reconciles ({', '.join(f'{c} {int(n)}' for c, n in sorted(rec.items()))}), "
          f"{int(q)} API requests, {q / max(r, 1):.2f} per reconcile")
    by_verb = collections.Counter()
    for (verb, _), v in req.items():
        by_verb[verb] += v
    print("  by verb: " + ", ".join(f"{v} {int(n)}" for v, n in by_verb.most_common()))
    print("  top: " + ", ".join(f"{v} {res} {int(n)}" for (v, res), n in req.most_common(8)))
print(f"all operators: {int(total_rec)} reconciles, {int(total_req)} API requests, "
      f"{total_req / max(total_rec, 1):.2f} per reconcile")
def apiserver(path):
    c = collections.Counter()
    for name, labels, v in parse(path):
        c[(labels.get("verb", ""), labels.get("resource", ""))] += v
    return c
delta = apiserver(f"{out}/apiserver-after.txt")
delta.subtract(apiserver(f"{out}/apiserver-before.txt"))
by_verb = collections.Counter()
for (verb, _), v in delta.items():
    by_verb[verb] += v
print(f"apiserver_request_total delta (all clients): {int(sum(delta.values()))}; by verb: "
      + ", ".join(f"{v} {int(n)}" for v, n in by_verb.most_common()))
summary["all"] = {"requests": int(total_req), "reconciles": int(total_rec)}
summary["apiserver"] = int(sum(delta.values()))
json.dump(summary, open(f"{out}/summary.json", "w"))
PY
cleanup
}

if [[ -n "$base" ]]; then
  # The base's binaries, built from a worktree into a target dir of their own (a cold build
  # the first time, incremental after): two checkouts of the same workspace crates must not
  # share one, or each build's artifacts overwrite the other's.
  tree=/tmp/gryvia-api-requests-base
  git worktree prune
  [[ -d "$tree" ]] || git worktree add -q --detach "$tree" "$base"
  git -C "$tree" checkout -q --detach "$base"
  CARGO_TARGET_DIR="${GRYVIA_BASE_TARGET_DIR:-$PWD/target/api-requests-base}" \
    cargo build -q --manifest-path "$tree/Cargo.toml" --workspace --all-features --bins
  mkdir -p "$out/base-bin"
  for b in gryvia gryvia-quota-operator gryvia-ai-operator gryvia-gpu-operator; do
    cp "${GRYVIA_BASE_TARGET_DIR:-$PWD/target/api-requests-base}/debug/$b" "$out/base-bin/"
  done
fi
cargo build -q --workspace --all-features --bins
if [[ -n "$base" ]]; then
  echo "== $(git rev-parse --short "$base") (base)"
  measure "$out/base-bin" "$out/base"
  echo "== this tree ($(git rev-parse --short HEAD))"
fi
measure "$PWD/target/debug" "$out/head"
if [[ -n "$base" ]]; then
  python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
b, h = (json.load(open(f"{out}/{r}/summary.json")) for r in ("base", "head"))
print(f"{'':16} {'base':>26} {'this tree':>26}")
for op in ["quota-operator", "ai-operator", "gpu-operator", "all"]:
    cell = lambda s: f"{s[op]['requests']:>6} / {s[op]['reconciles']:>4} = {s[op]['requests'] / max(s[op]['reconciles'], 1):5.2f}"
    print(f"{op:16} {cell(b):>26} {cell(h):>26}")
print(f"{'apiserver delta':16} {b['apiserver']:>26} {h['apiserver']:>26}")
PY
fi
