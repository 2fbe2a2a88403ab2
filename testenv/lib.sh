# shellcheck shell=bash disable=SC2034
# Shared helpers for testenv/build, testenv/up and testenv/down. Sourced, not executed.

export LC_NUMERIC=C  # EPOCHREALTIME and awk arithmetic need "." as the decimal point
TESTENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[testenv] %s\n' "$*" >&2; }
die() { printf '[testenv] ERROR: %s\n' "$*" >&2; exit 1; }

# --- versions: the wrapper go.mod files are the single source of truth --------------------------
modver() { # modver <go.mod> <module path>
  local v
  v="$(awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1")"
  [[ -n "$v" ]] || die "cannot find $2 in $1"
  printf '%s' "$v"
}
K8S_VERSION="$(modver "$TESTENV_DIR/go/k8s/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$TESTENV_DIR/go/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(modver "$TESTENV_DIR/go/kwok/go.mod" sigs.k8s.io/kwok)"
KUEUE_VERSION="$(modver "$TESTENV_DIR/go/kueue/go.mod" sigs.k8s.io/kueue)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" && -n "$KWOK_VERSION" && -n "$KUEUE_VERSION" ]] || exit 1

# Cache key: the three versions plus a hash of every wrapper-module file and of BUILD_RECIPE, so
# editing go.mod/go.sum/main.go/tools.go produces a fresh directory. Bump BUILD_RECIPE whenever
# testenv/build changes how binaries are compiled (flags, ldflags, the set of binaries).
BUILD_RECIPE=1
testenv_hash() {
  { echo "recipe=$BUILD_RECIPE"; cd "$TESTENV_DIR" && cat go/{etcd,k8s,kwok}/go.mod go/{etcd,k8s,kwok}/go.sum go/{etcd,k8s,kwok}/*.go; } | sha256sum | cut -c1-10
}
# Kueue (testenv/build --with-kueue, testenv/up --with-kueue) has its own cache directory: the
# control plane's binaries stay valid when only Kueue changes, and a plain build never compiles it.
KUEUE_RECIPE=1
kueue_hash() {
  { echo "recipe=$KUEUE_RECIPE"; cd "$TESTENV_DIR" && cat go/kueue/go.mod go/kueue/go.sum go/kueue/*.go; } | sha256sum | cut -c1-10
}
# Prometheus (testenv/build --with-prometheus): the E2E tests of inference canaries start it
# themselves, fed by a scrape of series the test serves. Its own cache directory too.
PROMETHEUS_VERSION=v0.316.0
PROMETHEUS_RECIPE=1
prometheus_hash() {
  { echo "recipe=$PROMETHEUS_RECIPE"; cd "$TESTENV_DIR" && cat go/prometheus/go.mod go/prometheus/go.sum go/prometheus/*.go; } | sha256sum | cut -c1-10
}
# Helm (testenv/build --with-helm): CI lints and renders deploy/helm/gryvia with it, and the plain
# manifests under deploy/ are rendered from the chart by it. Its own cache directory too.
HELM_VERSION=v4.3.2
HELM_RECIPE=1
helm_hash() {
  { echo "recipe=$HELM_RECIPE"; cd "$TESTENV_DIR" && cat go/helm/go.mod go/helm/go.sum go/helm/*.go; } | sha256sum | cut -c1-10
}
# Dex (testenv/build --with-dex, testenv/up --with-dex): the OIDC issuer the gateway's tests get
# real tokens from. Its module serves v2.45.1 only as this pseudo-version. Its own cache directory.
DEX_VERSION="$(modver "$TESTENV_DIR/go/dex/go.mod" github.com/dexidp/dex)"
DEX_RECIPE=1
dex_hash() {
  { echo "recipe=$DEX_RECIPE"; cd "$TESTENV_DIR" && cat go/dex/go.mod go/dex/go.sum go/dex/*.go; } | sha256sum | cut -c1-10
}
VERSION_KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_$(testenv_hash)"
CACHE_BASE="${GRYVIA_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gryvia/testenv}"
BIN_DIR="$CACHE_BASE/$VERSION_KEY"
KUEUE_BIN_DIR="$CACHE_BASE/kueue-${KUEUE_VERSION}_$(kueue_hash)"
PROMETHEUS_BIN_DIR="$CACHE_BASE/prometheus-${PROMETHEUS_VERSION}_$(prometheus_hash)"
HELM_BIN_DIR="$CACHE_BASE/helm-${HELM_VERSION}_$(helm_hash)"
DEX_BIN_DIR="$CACHE_BASE/dex-v2.45.1_$(dex_hash)"

# Binaries that testenv/build produces (kubectl: see testenv/README.md, "kubectl").
TESTENV_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

# KWOK's Logs CRD (per-pod simulated logs, testenv/kwok/podlogs.py), copied from its module.
KWOK_LOGS_CRD=kwok.x-k8s.io_logs.yaml

binaries_present() {
  local b
  for b in "${TESTENV_BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
  [[ -f "$BIN_DIR/$KWOK_LOGS_CRD" ]]
}

# Kueue's controller manager, the runner of its scheduler performance test, and the module's
# CRDs and webhook manifests (copied next to the binaries, applied as they are).
prometheus_present() { [[ -x "$PROMETHEUS_BIN_DIR/prometheus" ]]; }
helm_present() { [[ -x "$HELM_BIN_DIR/helm" ]]; }
dex_present() { [[ -x "$DEX_BIN_DIR/dex" ]]; }

kueue_present() {
  [[ -x "$KUEUE_BIN_DIR/kueue" && -x "$KUEUE_BIN_DIR/kueue-scheduler-perf-runner" \
     && -f "$KUEUE_BIN_DIR/webhook-manifests.yaml" && -d "$KUEUE_BIN_DIR/crds" ]]
}

find_go() {
  if [[ -n "${GO:-}" ]]; then printf '%s' "$GO"; return; fi
  if command -v go >/dev/null 2>&1; then command -v go; return; fi
  if [[ -x /usr/local/go/bin/go ]]; then printf '%s' /usr/local/go/bin/go; return; fi
  die "no Go toolchain found (set GO=/path/to/go or put go on PATH); needed to build the test binaries"
}

# --- state dir and ports -------------------------------------------------------------------------
STATE_DIR="${GRYVIA_TESTENV_DIR:-/tmp/gryvia-testenv}"
[[ "$STATE_DIR" == /* ]] || STATE_DIR="$PWD/$STATE_DIR"
STATE_DIR="${STATE_DIR%/}"
STATE_MARKER=".gryvia-testenv"   # testenv/down only deletes a state dir that carries this file
check_state_dir() {
  case "$STATE_DIR" in
    "" | / | /tmp | /root | /home | "$HOME" | /usr* | /etc* | /var | /bin* | /lib*)
      die "refusing to use '$STATE_DIR' as the state dir (GRYVIA_TESTENV_DIR)" ;;
  esac
  if [[ -d "$STATE_DIR" && ! -f "$STATE_DIR/$STATE_MARKER" ]] && [[ -n "$(ls -A "$STATE_DIR")" ]]; then
    die "$STATE_DIR exists, is not empty and was not created by testenv/up; refusing to touch it"
  fi
}
APISERVER_PORT="${GRYVIA_TESTENV_APISERVER_PORT:-16443}"
ETCD_PORT="${GRYVIA_TESTENV_ETCD_PORT:-16379}"         # peer port is ETCD_PORT+1
KCM_PORT="${GRYVIA_TESTENV_KCM_PORT:-16257}"
SCHEDULER_PORT="${GRYVIA_TESTENV_SCHEDULER_PORT:-16259}"
KWOK_PORT="${GRYVIA_TESTENV_KWOK_PORT:-16247}"
KUEUE_WEBHOOK_PORT="${GRYVIA_TESTENV_KUEUE_WEBHOOK_PORT:-16943}"
KUEUE_HEALTH_PORT="${GRYVIA_TESTENV_KUEUE_HEALTH_PORT:-16981}"  # metrics on KUEUE_HEALTH_PORT+1
DEX_PORT="${GRYVIA_TESTENV_DEX_PORT:-16556}"

# Components in start order; testenv/down stops them in reverse order. Kueue runs only when
# testenv/up was given --with-kueue (it is then last: started after the CRDs, stopped first).
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok podlogs)
OPTIONAL_COMPONENTS=(kueue dex)

# pid_alive <component>: the pid in the pidfile exists and its command line mentions our state dir
# (guards against a recycled pid belonging to somebody else).
pid_alive() {
  local f="$STATE_DIR/pids/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$STATE_DIR/" || return 1
  # a zombie is not alive
  [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" != Z ]]
}

# take_lock: one testenv/up or testenv/down at a time per state dir (lock file next to it, fd 8).
take_lock() {
  mkdir -p "$(dirname "$STATE_DIR")"
  exec 8>"$STATE_DIR.lock"
  if ! flock -n 8; then
    log "waiting for another testenv/up or testenv/down ($STATE_DIR.lock)"
    flock -w "${GRYVIA_TESTENV_LOCK_TIMEOUT:-900}" 8 \
      || die "timed out waiting for $STATE_DIR.lock (held by another testenv/up or testenv/down)"
  fi
}

kubectl_bin() {
  if [[ -x "$BIN_DIR/kubectl" ]]; then printf '%s' "$BIN_DIR/kubectl"
  elif command -v kubectl >/dev/null 2>&1; then command -v kubectl
  else die "no kubectl: run testenv/build"; fi
}
