#!/usr/bin/env bash
# The per-packet cost of the cgroup programs, measured by the kernel around a million runs
# (BPF_PROG_TEST_RUN: no clock read per run, unlike the run-time statistics), for this tree's
# programs and for those of git revision REV (built from that revision's gryvia-ebpf/programs
# in a worktree), with no deny entry and with 1,000 that do not match. Root.
#
#   benches/program-cost.sh [REV]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev="${1:-}"
[[ "$(id -u)" == 0 ]] || { echo "needs root (loads eBPF programs)" >&2; exit 1; }
cargo build --release -q -p gryvia-ebpf --bin gryvia-program-cost
P=target/release/gryvia-program-cost
if [[ -n "$rev" ]]; then
  wt="$(mktemp -d /tmp/gryvia-programs-XXXXXX)"
  trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
  git worktree add -q --detach "$wt" "$rev"
  (cd "$wt/gryvia-ebpf/programs" && env -u RUSTFLAGS -u CARGO_TARGET_DIR RUSTC_BOOTSTRAP=1 \
     PATH="$HOME/.cargo/bin:$PATH" CARGO_ENCODED_RUSTFLAGS=$'-Cdebuginfo=2\x1f-Clink-arg=--btf' \
     cargo build -q --release --locked --target bpfel-unknown-none -Z build-std=core --target-dir target)
  object="$wt/gryvia-ebpf/programs/target/bpfel-unknown-none/release/gryvia-ebpf-programs"
  echo "programs of $rev:"
  "$P" --object "$object"
fi
echo "programs of this tree:"
"$P"
"$P" --deny-entries 1000
