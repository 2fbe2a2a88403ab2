//! Kernel tests: the real programs loaded and attached on this machine's kernel, their counts
//! compared with traffic whose ground truth the test knows (`gryvia-traffic`).
//!
//! Needs root. Without it the tests print why and pass, unless `GRYVIA_EBPF=1` demands them
//! (as `scripts/test` does when it runs as root), in which case they fail. Every namespace,
//! cgroup and nftables table a test makes is removed when the test ends, also on failure; the
//! programs detach when the collector is dropped. Tests run one at a time (a static lock): they
//! share the kernel's tracepoints.

#![expect(clippy::unwrap_used, reason = "tests panic on failure")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use gryvia_ebpf::{
    Collector, DIRECTION_EGRESS, DenyEntry, DenyKey, MAX_FLOWS, MIN_FLOWS, Options, Programs,
    Snapshot, TcpEvents, Traffic, host,
};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn can_run() -> bool {
    if host::effective_uid() == 0 {
        return true;
    }
    let demanded = std::env::var("GRYVIA_EBPF").is_ok_and(|v| v == "1" || v == "true");
    assert!(
        !demanded,
        "GRYVIA_EBPF=1 but not root: the eBPF tests need root"
    );
    eprintln!("skipping eBPF kernel test: not root (set GRYVIA_EBPF=1 as root to run)");
    false
}

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{prefix}{}{n}", std::process::id() % 100_000)
}

/// Unmounts tracefs on drop when the test's collector mounted it (it was not mounted before).
struct TracefsGuard {
    mounted_before: bool,
}

impl TracefsGuard {
    fn new() -> Self {
        TracefsGuard {
            mounted_before: host::mounted_tracefs().is_some(),
        }
    }
}

impl Drop for TracefsGuard {
    fn drop(&mut self) {
        if !self.mounted_before {
            let _ = Command::new("umount").arg("/sys/kernel/tracing").status();
        }
    }
}

/// A cgroup v2 directory for the traffic, removed on drop.
struct TestCgroup {
    path: PathBuf,
    id: u64,
}

impl TestCgroup {
    fn new() -> Self {
        let root = host::cgroup2_root().unwrap();
        let path = root.join(unique("gryvia-ebpf-test-"));
        std::fs::create_dir(&path).unwrap();
        let id = host::cgroup_id(&path).unwrap();
        TestCgroup { path, id }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // The traffic processes have exited; an empty cgroup can be removed.
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A network namespace, deleted on drop (with everything in it: veth ends, nftables).
struct Netns(String);

impl Netns {
    fn new() -> Self {
        let name = unique("gryvia-t");
        sh(&format!("ip netns add {name}"));
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A veth pair from the host into `ns`: `<net>.1/30` on the host's end, `<net>.2/30` in the
/// namespace. No IPv6 and static neighbours, so the only frames on the wire are the test's.
/// Returns the host end's name and interface index (delete it when done).
fn veth_into(ns: &Netns, prefix: &str, net: [u8; 3]) -> (String, u32) {
    let host_if = unique(&format!("{prefix}h"));
    let peer_if = unique(&format!("{prefix}p"));
    let [a, b, c] = net;
    sh(&format!(
        "ip link add {host_if} type veth peer name {peer_if} && \
         ip link set {peer_if} netns {n} && \
         sysctl -qw net.ipv6.conf.{host_if}.disable_ipv6=1 && \
         ip netns exec {n} sysctl -qw net.ipv6.conf.{peer_if}.disable_ipv6=1 && \
         ip addr add {a}.{b}.{c}.1/30 dev {host_if} && \
         ip netns exec {n} ip addr add {a}.{b}.{c}.2/30 dev {peer_if} && \
         ip link set {host_if} up && ip netns exec {n} ip link set {peer_if} up && \
         ip netns exec {n} ip neigh replace {a}.{b}.{c}.1 lladdr $(cat /sys/class/net/{host_if}/address) dev {peer_if} nud permanent && \
         ip neigh replace {a}.{b}.{c}.2 lladdr $(ip netns exec {n} cat /sys/class/net/{peer_if}/address) dev {host_if} nud permanent",
        n = ns.0
    ));
    let ifindex = std::fs::read_to_string(format!("/sys/class/net/{host_if}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (host_if, ifindex)
}

/// Runs gryvia-traffic in `cgroup` (optionally inside a network namespace) and returns what it
/// printed.
fn traffic(cgroup: &Path, netns: Option<&str>, args: &str) -> Value {
    let bin = env!("CARGO_BIN_EXE_gryvia-traffic");
    let prefix = netns
        .map(|n| format!("ip netns exec {n} "))
        .unwrap_or_default();
    let cmd = format!(
        "echo $$ > {}/cgroup.procs && exec {prefix}{bin} {args}",
        cgroup.display()
    );
    let out = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn start(options: &Options) -> Collector {
    match Collector::start(options) {
        Ok(c) => c,
        Err(e) => panic!("start the collector: {e}"),
    }
}

const CONNECTIONS: u64 = 30;
const BYTES: u64 = 200_000;
const REPLY: u64 = 3_000;

#[test]
fn tcp_on_loopback_is_counted_exactly_per_cgroup_and_per_flow() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Dropped after everything below (the collector first), so tracefs is free to unmount.
    let _tracefs = TracefsGuard::new();
    let collector = start(&Options::default());
    let cg = TestCgroup::new();
    let run = traffic(
        &cg.path,
        None,
        &format!("tcp --connections {CONNECTIONS} --bytes {BYTES} --reply {REPLY}"),
    );
    let snap: Snapshot = collector.snapshot().unwrap();
    let port = u16::try_from(run["port"].as_u64().unwrap()).unwrap();
    let client_ports: BTreeSet<u16> = run["clientPorts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u16::try_from(p.as_u64().unwrap()).unwrap())
        .collect();
    assert_eq!(client_ports.len() as u64, CONNECTIONS);

    // Per cgroup: both ends live in the test cgroup, so every byte is sent once and received
    // once. Payload is exact; the rest is 52 header bytes a packet (IPv4 20, TCP 20, timestamps
    // 12) plus 8 more option bytes on each SYN and SYN-ACK.
    let t = snap.cgroups().get(&cg.id).copied().unwrap_or_default();
    let payload = CONNECTIONS * (BYTES + REPLY);
    assert_eq!(t.tx_payload, payload, "{t:?}");
    assert_eq!(t.rx_payload, payload, "{t:?}");
    assert_eq!(
        t.tx_bytes,
        payload + 52 * t.tx_packets + 16 * CONNECTIONS,
        "{t:?}"
    );
    assert_eq!(
        t.rx_bytes,
        payload + 52 * t.rx_packets + 16 * CONNECTIONS,
        "{t:?}"
    );

    // Per flow, from each socket's side, joined to the cgroup.
    let mut clients = 0;
    let mut servers = 0;
    for (key, flow) in snap.flows_on_port(port) {
        let d = gryvia_ebpf::describe(key);
        if key.local_port == port && key.remote_port == 0 {
            // The listener: CLOSE -> LISTEN -> CLOSE.
            assert_eq!(flow.tcp.transitions, 2, "{d}: {flow:?}");
            continue;
        }
        assert_eq!(flow.cgroup_id, cg.id, "{d}");
        assert_eq!(
            (flow.tcp.established, flow.tcp.closed),
            (1, 1),
            "{d}: {flow:?}"
        );
        assert_eq!(flow.tcp.retransmits, 0, "{d}");
        if key.local_port == port {
            servers += 1;
            assert!(client_ports.contains(&key.remote_port), "{d}");
            assert_eq!(
                (flow.traffic.rx_payload, flow.traffic.tx_payload),
                (BYTES, REPLY),
                "{d}"
            );
        } else {
            clients += 1;
            assert!(client_ports.contains(&key.local_port), "{d}");
            assert_eq!(
                (flow.traffic.tx_payload, flow.traffic.rx_payload),
                (BYTES, REPLY),
                "{d}"
            );
            // SYN_SENT -> ESTABLISHED -> FIN_WAIT1 -> FIN_WAIT2 -> CLOSE (CLOSE -> SYN_SENT
            // happens before the kernel picks the local port, so no flow can own it).
            assert_eq!(flow.tcp.transitions, 4, "{d}: {flow:?}");
        }
        let srtt = flow.rtt.map(|r| r.srtt_us).unwrap_or(0);
        assert!(srtt > 0, "{d}: no RTT sample: {flow:?}");
    }
    assert_eq!((clients, servers), (CONNECTIONS, CONNECTIONS));
}

#[test]
fn udp_across_a_veth_pair_is_counted_by_xdp_and_the_cgroup() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Dropped after everything below (the collector first), so tracefs is free to unmount.
    let _tracefs = TracefsGuard::new();
    let ns = Netns::new();
    let (host_if, ifindex) = veth_into(&ns, "gv", [10, 213, 7]);
    let collector = start(&Options {
        interfaces: vec![host_if.clone()],
        ..Options::default()
    });
    let cg = TestCgroup::new();
    let (count, size) = (100u64, 200u64);
    traffic(
        &cg.path,
        Some(&ns.0),
        &format!("udp --to 10.213.7.1:9 --count {count} --size {size}"),
    );
    let snap = collector.snapshot().unwrap();
    // XDP on the host end sees whole frames: Ethernet 14 + IPv4 20 + UDP 8 + payload.
    let x = snap.interfaces.get(&ifindex).copied().unwrap_or_default();
    assert_eq!(
        (x.rx_packets, x.rx_bytes),
        (count, count * (14 + 20 + 8 + size)),
        "{x:?}"
    );
    // The sender's cgroup saw the same datagrams leave (from the IP header on), although the
    // socket lives in another network namespace.
    let t = snap.cgroups().get(&cg.id).copied().unwrap_or_default();
    assert_eq!(
        (t.tx_packets, t.tx_bytes, t.tx_payload),
        (count, count * (20 + 8 + size), count * size),
        "{t:?}"
    );
    drop(collector);
    let _ = Command::new("ip").args(["link", "del", &host_if]).status();
}

/// Sends `count` datagrams of `size` bytes from the namespace to `to` and returns how many the
/// kernel refused and how many frames reached the host's end of the veth (XDP).
fn udp_through(
    collector: &Collector,
    cg: &TestCgroup,
    ns: &Netns,
    ifindex: u32,
    to: &str,
    count: u64,
) -> (u64, u64) {
    let before = collector.snapshot().unwrap();
    let run = traffic(
        &cg.path,
        Some(&ns.0),
        &format!("udp --to {to} --count {count} --size 100"),
    );
    let after = collector.snapshot().unwrap();
    let frames = |s: &Snapshot| s.interfaces.get(&ifindex).map_or(0, |t| t.rx_packets);
    (
        run["refused"].as_u64().unwrap(),
        frames(&after) - frames(&before),
    )
}

#[test]
fn a_deny_entry_drops_exactly_its_traffic_and_counts_it_per_rule() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let _tracefs = TracefsGuard::new();
    let ns = Netns::new();
    let (host_if, ifindex) = veth_into(&ns, "gd", [10, 213, 9]);
    let mut collector = start(&Options {
        programs: Programs {
            tcp_flows: false,
            tcp_retransmits: false,
            ..Programs::default()
        },
        interfaces: vec![host_if.clone()],
        ..Options::default()
    });
    let cg = TestCgroup::new();
    let pod = [10, 213, 9, 2];
    // Rule 3: UDP to port 9 of the /24 (the trie matches the host's .1 by prefix).
    let udp9 = DenyEntry {
        key: DenyKey {
            direction: DIRECTION_EGRESS,
            protocol: 17,
            port: 9,
            local: pod,
            remote: [10, 213, 9, 0],
        },
        remote_prefix: 24,
        rule: 3,
    };
    collector.set_deny(&[udp9]).unwrap();
    let (count, to9, to10) = (50u64, "10.213.9.1:9", "10.213.9.1:10");
    // Denied: every datagram refused at the sender, none on the wire, each counted on rule 3.
    assert_eq!(
        udp_through(&collector, &cg, &ns, ifindex, to9, count),
        (count, 0)
    );
    // Another port of the same peer is untouched.
    assert_eq!(
        udp_through(&collector, &cg, &ns, ifindex, to10, count),
        (0, count)
    );
    let drops = collector.deny_drops().unwrap();
    assert_eq!((drops[3], drops.iter().sum::<u64>()), (count, count));
    // Dropped packets are not counted as the pod's traffic: only port 10's left.
    let t = collector.snapshot().unwrap().cgroups()[&cg.id];
    assert_eq!((t.tx_packets, t.tx_payload), (count, count * 100), "{t:?}");

    // Replaced by rule 5: everything to the host's /32, any protocol and port.
    let all = DenyEntry {
        key: DenyKey {
            direction: DIRECTION_EGRESS,
            protocol: 0,
            port: 0,
            local: pod,
            remote: [10, 213, 9, 1],
        },
        remote_prefix: 32,
        rule: 5,
    };
    collector.set_deny(&[all]).unwrap();
    assert_eq!(
        udp_through(&collector, &cg, &ns, ifindex, to10, count),
        (count, 0)
    );
    let drops = collector.deny_drops().unwrap();
    assert_eq!((drops[3], drops[5]), (count, count));

    // The same through the kernel's test run: a TCP segment to a denied port is dropped (and
    // counted), the other direction passes.
    let tcp = DenyEntry {
        key: DenyKey {
            direction: DIRECTION_EGRESS,
            protocol: 6,
            port: 5201,
            local: [10, 1, 0, 1],
            remote: [10, 1, 0, 2],
        },
        remote_prefix: 32,
        rule: 7,
    };
    collector.set_deny(&[all, tcp]).unwrap();
    let frame = gryvia_ebpf::tcp_frame(([10, 1, 0, 1], 40_000), ([10, 1, 0, 2], 5201), 100);
    let run = collector.test_run("cgroup_egress", &frame, 10).unwrap();
    assert_eq!(run.verdict, 0);
    assert_eq!(collector.deny_drops().unwrap()[7], 10);
    assert_eq!(
        collector
            .test_run("cgroup_ingress", &frame, 10)
            .unwrap()
            .verdict,
        1
    );

    // No entries: nothing is dropped any more.
    collector.set_deny(&[]).unwrap();
    assert_eq!(
        collector
            .test_run("cgroup_egress", &frame, 1)
            .unwrap()
            .verdict,
        1
    );
    assert_eq!(
        udp_through(&collector, &cg, &ns, ifindex, to9, count),
        (0, count)
    );
    drop(collector);
    let _ = Command::new("ip").args(["link", "del", &host_if]).status();
}

#[test]
fn dropped_segments_show_up_as_retransmissions_of_their_flows() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Dropped after everything below (the collector first), so tracefs is free to unmount.
    let _tracefs = TracefsGuard::new();
    let ns = Netns::new();
    // The kernel has no netem (CONFIG_NET_SCH_NETEM is not set): one TCP segment in ten is
    // dropped by nftables inside the test's own namespace instead, on input: a segment dropped
    // on output never left, so TCP sends it again as new data, not as a retransmission (a run
    // that dropped on output saw none when no ACK happened to be lost).
    sh(&format!(
        "ip netns exec {n} ip link set lo up && ip netns exec {n} nft -f - <<'EOF'\n\
         table inet gryvia_loss {{\n\
           chain lose {{ type filter hook input priority 0; meta l4proto tcp tcp flags & (syn|fin|rst) == 0 numgen random mod 10 == 0 drop; }}\n\
         }}\n\
         EOF",
        n = ns.0
    ));
    let collector = start(&Options {
        programs: Programs {
            interface_counters: false,
            ..Programs::default()
        },
        ..Options::default()
    });
    let cg = TestCgroup::new();
    let run = traffic(
        &cg.path,
        Some(&ns.0),
        "tcp --connections 3 --bytes 2000000 --reply 1000",
    );
    let port = u16::try_from(run["port"].as_u64().unwrap()).unwrap();
    let snap = collector.snapshot().unwrap();
    let retransmits: u64 = snap
        .flows_on_port(port)
        .map(|(_, f)| f.tcp.retransmits)
        .sum();
    assert!(retransmits > 0, "no retransmission seen on port {port}");
    // Retransmissions are per flow: the client sockets sent the data, so they retransmitted.
    let client_retx: u64 = snap
        .flows_on_port(port)
        .filter(|(k, _)| k.remote_port == port)
        .map(|(_, f)| f.tcp.retransmits)
        .sum();
    assert!(client_retx > 0, "retransmissions not on the sending flows");
    // The payload still arrived exactly once at the application, while the wire carried more.
    let t = snap.cgroups().get(&cg.id).copied().unwrap_or_default();
    assert!(t.tx_payload > 3 * (2_000_000 + 1_000), "{t:?}");
}

#[test]
fn a_missing_interface_is_a_clear_error() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Dropped after everything below (the collector first), so tracefs is free to unmount.
    let _tracefs = TracefsGuard::new();
    let err = Collector::start(&Options {
        interfaces: vec!["gryvia-nope0".to_owned()],
        ..Options::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.starts_with("attach iface_count to gryvia-nope0:"),
        "{err}"
    );
}

#[test]
fn max_flows_sizes_the_flow_maps_and_bounds_what_they_hold() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Dropped after everything below (the collector first), so tracefs is free to unmount.
    let _tracefs = TracefsGuard::new();
    let err = Collector::start(&Options {
        max_flows: Some(MIN_FLOWS - 1),
        ..Options::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert_eq!(
        err,
        "options: max flows 1023: at least 1024 (the per-flow maps evict the least recently used flows beyond it)"
    );
    let default = start(&Options::default());
    assert_eq!(default.max_flows().unwrap(), MAX_FLOWS);
    drop(default);

    let collector = start(&Options {
        max_flows: Some(MIN_FLOWS),
        ..Options::default()
    });
    assert_eq!(collector.max_flows().unwrap(), MIN_FLOWS);
    // 800 connections are 1,600 flows (a client and a server side each): more than the maps
    // hold, so the least recently used are evicted, and counting goes on.
    let cg = TestCgroup::new();
    traffic(
        &cg.path,
        None,
        "tcp --connections 800 --bytes 1000 --reply 100",
    );
    let snap: Snapshot = collector.snapshot().unwrap();
    // Each map holds at most its capacity; each evicts on its own, so the flows of the three
    // together may be more.
    let flows = snap.flows.values();
    for (map, held) in [
        (
            "FLOW_TRAFFIC",
            flows
                .clone()
                .filter(|f| f.traffic != Traffic::default())
                .count(),
        ),
        (
            "TCP_EVENTS",
            flows
                .clone()
                .filter(|f| f.tcp != TcpEvents::default())
                .count(),
        ),
        ("TCP_RTT", flows.filter(|f| f.rtt.is_some()).count()),
    ] {
        assert!(
            (1..=MIN_FLOWS as usize).contains(&held),
            "{map}: {held} flows held"
        );
    }
    let t = snap.cgroups().get(&cg.id).copied().unwrap_or_default();
    assert!(t.tx_packets > 0 && t.rx_packets > 0, "{t:?}");
}

/// The file offset and size of the ELF64 section `name` (little-endian; the object is ours).
fn elf_section(elf: &[u8], name: &str) -> (usize, usize) {
    let u16_at = |o: usize| usize::from(u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()));
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at =
        |o: usize| usize::try_from(u64::from_le_bytes(elf[o..o + 8].try_into().unwrap())).unwrap();
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not an ELF64 object");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let names = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(header)
        .find(|&h| {
            let start = names + u32_at(h);
            elf[start..].split(|&b| b == 0).next() == Some(name.as_bytes())
        })
        .map(|h| (u64_at(h + 0x18), u64_at(h + 0x20)))
        .unwrap_or_else(|| panic!("no section {name}"))
}

#[test]
fn a_program_the_verifier_refuses_is_named_with_the_verifier_log() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let _tracefs = TracefsGuard::new();
    // Our object with the XDP program's first instruction replaced by `exit`: it returns
    // without setting r0, and the rest of it becomes unreachable. The kernel must refuse it.
    let mut object = gryvia_ebpf::embedded_object().to_vec();
    let (offset, size) = elf_section(&object, "xdp");
    assert!(size >= 8);
    object[offset..offset + 8].copy_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
    let dir = std::env::temp_dir().join(unique("gryvia-ebpf-broken-"));
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("programs.o");
    std::fs::write(&path, &object).unwrap();
    let result = Collector::start(&Options {
        programs: Programs {
            interface_counters: true,
            cgroup_traffic: false,
            tcp_flows: false,
            tcp_retransmits: false,
        },
        interfaces: vec!["lo".to_owned()],
        object: Some(path.clone()),
        ..Options::default()
    });
    std::fs::remove_dir_all(&dir).unwrap();
    let err = result.err().map(|e| e.to_string()).unwrap_or_default();
    eprintln!("{err}");
    assert!(
        err.starts_with("program iface_count failed to load:"),
        "{err}"
    );
    // The log of the verifier, not only the errno.
    assert!(err.contains("Verifier output:"), "{err}");
    assert!(err.contains("unreachable insn 1"), "{err}");

    // An object that is not one is named with its path.
    let missing = std::env::temp_dir().join(unique("gryvia-ebpf-none-"));
    let err = Collector::start(&Options {
        object: Some(missing.clone()),
        ..Options::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.starts_with(&format!("load the eBPF object: {}:", missing.display())),
        "{err}"
    );
}
