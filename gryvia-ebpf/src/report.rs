//! From snapshots to what the collector reports, pure: the window between two snapshots, the
//! pod a cgroup belongs to (from the kubelet's cgroup paths), and the status of the node's
//! GryviaFabricSignal and GryviaFlowAggregate.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{
    FlowRecord, GryviaFabricSignalStatus, GryviaFlowAggregateStatus, InterfaceCounters, Protocol,
};

use crate::{Flow, Snapshot, TcpEvents, Traffic};
use gryvia_ebpf_common::{IPPROTO_TCP, IPPROTO_UDP};

/// Most flows a GryviaFlowAggregate lists (its schema's cap); the rest are counted only.
pub const MAX_FLOW_RECORDS: usize = 2000;

fn sub(now: u64, before: u64) -> u64 {
    now.saturating_sub(before)
}

fn traffic_delta(now: &Traffic, before: Option<&Traffic>) -> Traffic {
    let Some(b) = before else { return *now };
    // A counter below its previous value was evicted and started again: all of it is new.
    if now.rx_bytes < b.rx_bytes || now.tx_bytes < b.tx_bytes {
        return *now;
    }
    Traffic {
        rx_packets: sub(now.rx_packets, b.rx_packets),
        rx_bytes: sub(now.rx_bytes, b.rx_bytes),
        rx_payload: sub(now.rx_payload, b.rx_payload),
        tx_packets: sub(now.tx_packets, b.tx_packets),
        tx_bytes: sub(now.tx_bytes, b.tx_bytes),
        tx_payload: sub(now.tx_payload, b.tx_payload),
    }
}

fn tcp_delta(now: &TcpEvents, before: Option<&TcpEvents>) -> TcpEvents {
    let Some(b) = before else { return *now };
    if now.transitions < b.transitions || now.retransmits < b.retransmits {
        return *now;
    }
    TcpEvents {
        established: sub(now.established, b.established),
        closed: sub(now.closed, b.closed),
        transitions: sub(now.transitions, b.transitions),
        retransmits: sub(now.retransmits, b.retransmits),
        states_seen: now.states_seen,
    }
}

/// What happened between two snapshots: counters as differences (a key new in `now` counts
/// whole), RTTs as in `now`. Keys without activity in the window are left out.
///
/// # Guarantees
/// - Never negative: a counter that went down (the map evicted and re-created the entry)
///   counts from zero.
/// - `delta(a, a)` is empty.
/// - A cgroup's traffic in the window is its unflowed traffic's difference plus the window's
///   traffic of each flow with its id: a flow the map evicted in the window loses only what it
///   carried since the last snapshot.
pub fn delta(before: &Snapshot, now: &Snapshot) -> Snapshot {
    let mut out = Snapshot::default();
    for (id, t) in &now.unflowed {
        let d = traffic_delta(t, before.unflowed.get(id));
        if d != Traffic::default() {
            out.unflowed.insert(*id, d);
        }
    }
    for (ifindex, t) in &now.interfaces {
        let d = traffic_delta(t, before.interfaces.get(ifindex));
        if d != Traffic::default() {
            out.interfaces.insert(*ifindex, d);
        }
    }
    for (key, f) in &now.flows {
        let b = before.flows.get(key);
        let traffic = traffic_delta(&f.traffic, b.map(|b| &b.traffic));
        let mut tcp = tcp_delta(&f.tcp, b.map(|b| &b.tcp));
        let rtt = f.rtt.filter(|r| {
            b.and_then(|b| b.rtt)
                .is_none_or(|old| old.samples != r.samples)
        });
        if traffic == Traffic::default()
            && tcp.transitions == 0
            && tcp.retransmits == 0
            && rtt.is_none()
        {
            continue;
        }
        if tcp.transitions == 0 {
            tcp.states_seen = 0;
        }
        out.flows.insert(
            *key,
            Flow {
                traffic,
                cgroup_id: f.cgroup_id,
                tcp,
                rtt,
            },
        );
    }
    out
}

/// The pod a cgroup belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The `gryvia.io/tenant` label of the pod or its namespace.
    pub tenant: Option<String>,
}

impl PodRef {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The pod UID in a kubelet cgroup path, for both cgroup drivers:
/// systemd (`.../kubepods-burstable-pod1b2c_..._.slice/cri-containerd-<id>.scope`, dashes of
/// the UID written as underscores) and cgroupfs (`/kubepods/burstable/pod1b2c-.../<id>`).
pub fn pod_uid_from_cgroup_path(path: &str) -> Option<String> {
    for segment in path.split('/').rev() {
        let segment = segment.strip_suffix(".slice").unwrap_or(segment);
        let Some(pos) = segment.rfind("pod") else {
            continue;
        };
        let candidate = segment[pos + 3..].replace('_', "-");
        let is_uid = candidate.len() == 36
            && candidate.chars().enumerate().all(|(i, c)| {
                if [8, 13, 18, 23].contains(&i) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if is_uid {
            return Some(candidate);
        }
    }
    None
}

/// cgroup ids of a cgroup v2 tree: id -> path below the root.
#[derive(Clone, Debug, Default)]
pub struct CgroupIndex {
    paths: HashMap<u64, String>,
}

impl CgroupIndex {
    /// Walks the tree under `root` (directories only; unreadable ones are skipped).
    pub fn scan(root: &Path) -> Self {
        let mut paths = HashMap::new();
        let mut stack: Vec<PathBuf> = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if let Ok(id) = crate::host::cgroup_id(&dir) {
                let rel = dir
                    .strip_prefix(root)
                    .map(|p| format!("/{}", p.display()))
                    .unwrap_or_default();
                paths.insert(id, if rel == "/" { "/".to_owned() } else { rel });
            }
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
        }
        CgroupIndex { paths }
    }

    /// An index from known pairs (tests).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (u64, String)>) -> Self {
        CgroupIndex {
            paths: pairs.into_iter().collect(),
        }
    }

    /// The path of a cgroup id.
    pub fn path(&self, id: u64) -> Option<&str> {
        self.paths.get(&id).map(String::as_str)
    }

    /// Whether the index knows an id.
    pub fn contains(&self, id: u64) -> bool {
        self.paths.contains_key(&id)
    }
}

/// Joins cgroup ids to pods: cgroup path -> pod UID -> pod.
#[derive(Clone, Debug, Default)]
pub struct PodResolver {
    /// cgroup ids and paths.
    pub cgroups: CgroupIndex,
    /// Pods of this node by UID.
    pub pods: BTreeMap<String, PodRef>,
}

impl PodResolver {
    /// The pod of a cgroup id, when its path names a pod this node runs.
    pub fn pod_of(&self, cgroup_id: u64) -> Option<&PodRef> {
        let path = self.cgroups.path(cgroup_id)?;
        self.pods.get(&pod_uid_from_cgroup_path(path)?)
    }
}

fn protocol(p: u8) -> Option<Protocol> {
    match p {
        IPPROTO_TCP => Some(Protocol::TCP),
        IPPROTO_UDP => Some(Protocol::UDP),
        _ => None,
    }
}

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The status of the node's GryviaFlowAggregate for a window: flows sorted by bytes (largest
/// first, then by key), at most [`MAX_FLOW_RECORDS`], each with its pod when known.
pub fn flow_aggregate_status(
    window: &Snapshot,
    pods: &PodResolver,
    start: Time,
    end: Time,
) -> GryviaFlowAggregateStatus {
    let mut flows: Vec<(u64, FlowRecord)> = window
        .flows
        .iter()
        .filter_map(|(k, f)| {
            let protocol = protocol(k.protocol)?;
            let src = crate::ip(k.family, &k.local_addr)?;
            let dst = crate::ip(k.family, &k.remote_addr)?;
            if f.traffic == Traffic::default() && f.tcp.retransmits == 0 {
                return None;
            }
            let bytes = f.traffic.tx_bytes + f.traffic.rx_bytes;
            Some((
                bytes,
                FlowRecord {
                    src_ip: src.to_string(),
                    src_port: i32::from(k.local_port),
                    dst_ip: dst.to_string(),
                    dst_port: i32::from(k.remote_port),
                    protocol,
                    tx_bytes: count(f.traffic.tx_bytes),
                    rx_bytes: count(f.traffic.rx_bytes),
                    retransmits: count(f.tcp.retransmits),
                    pod: pods.pod_of(f.cgroup_id).map(PodRef::key),
                },
            ))
        })
        .collect();
    let flow_count = count(flows.len() as u64);
    flows.sort_by(|a, b| {
        b.0.cmp(&a.0).then_with(|| {
            (&a.1.src_ip, a.1.src_port, &a.1.dst_ip, a.1.dst_port).cmp(&(
                &b.1.src_ip,
                b.1.src_port,
                &b.1.dst_ip,
                b.1.dst_port,
            ))
        })
    });
    flows.truncate(MAX_FLOW_RECORDS);
    GryviaFlowAggregateStatus {
        window_start: Some(start),
        window_end: Some(end),
        flows: flows.into_iter().map(|(_, f)| f).collect(),
        flow_count,
    }
}

/// An interface's link as sysfs states it: its state, its speed, and its error totals since
/// the interface came up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// `operstate` (`up`, `down`, `unknown`, ...); `None` when the interface is gone.
    pub oper_state: Option<String>,
    /// `speed` in Mbit/s; `None` where the driver reports none (virtual links say -1).
    pub speed_mbps: Option<i64>,
    /// `statistics/rx_errors`.
    pub rx_errors: u64,
    /// `statistics/tx_errors`.
    pub tx_errors: u64,
}

/// Reads interface `name` under `sys_net` (`/sys/class/net` on a node): what is missing or
/// unreadable stays empty, so a vanished interface reads as no state at all.
pub fn read_link(sys_net: &Path, name: &str) -> Link {
    let dir = sys_net.join(name);
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .map(|t| t.trim().to_owned())
    };
    let number = |f: &str| read(f).and_then(|t| t.parse::<i64>().ok());
    Link {
        oper_state: read("operstate"),
        speed_mbps: number("speed").filter(|s| *s > 0),
        rx_errors: number("statistics/rx_errors").map_or(0, |n| n.unsigned_abs()),
        tx_errors: number("statistics/tx_errors").map_or(0, |n| n.unsigned_abs()),
    }
}

/// Adds each interface's link state and speed, and its errors in the window (totals `now`
/// minus totals `before`; a counter that went back, after a reset, counts from zero), to
/// `status`'s interfaces.
pub fn add_links(
    status: &mut GryviaFabricSignalStatus,
    now: &BTreeMap<String, Link>,
    before: &BTreeMap<String, Link>,
) {
    for counters in &mut status.interfaces {
        let Some(link) = now.get(&counters.name) else {
            continue;
        };
        let old = before.get(&counters.name);
        let delta = |n: u64, o: Option<u64>| count(o.map_or(0, |o| n.checked_sub(o).unwrap_or(n)));
        counters.oper_state.clone_from(&link.oper_state);
        counters.speed_mbps = link.speed_mbps;
        counters.rx_errors = delta(link.rx_errors, old.map(|o| o.rx_errors));
        counters.tx_errors = delta(link.tx_errors, old.map(|o| o.tx_errors));
    }
}

/// The status of the node's GryviaFabricSignal for a window: frames per counted interface,
/// retransmissions, and the median of the RTT samples taken in the window.
pub fn fabric_signal_status(
    window: &Snapshot,
    interfaces: &BTreeMap<u32, String>,
    window_seconds: i32,
    updated: Time,
) -> GryviaFabricSignalStatus {
    let mut counters: Vec<InterfaceCounters> = interfaces
        .iter()
        .map(|(ifindex, name)| {
            let t = window.interfaces.get(ifindex).copied().unwrap_or_default();
            InterfaceCounters {
                name: name.clone(),
                rx_packets: count(t.rx_packets),
                rx_bytes: count(t.rx_bytes),
                ..InterfaceCounters::default()
            }
        })
        .collect();
    counters.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rtts: Vec<u64> = window
        .flows
        .values()
        .filter_map(|f| f.rtt.map(|r| r.srtt_us))
        .collect();
    rtts.sort_unstable();
    GryviaFabricSignalStatus {
        interfaces: counters,
        tcp_retransmits: count(window.flows.values().map(|f| f.tcp.retransmits).sum()),
        median_srtt_micros: (!rtts.is_empty()).then(|| count(rtts[rtts.len() / 2])),
        window_seconds,
        updated_at: Some(updated),
        ..GryviaFabricSignalStatus::default()
    }
}

/// Traffic per pod in a window (cgroups of one pod summed; cgroups of no known pod left out).
pub fn pod_traffic(window: &Snapshot, pods: &PodResolver) -> BTreeMap<String, (PodRef, Traffic)> {
    let mut out: BTreeMap<String, (PodRef, Traffic)> = BTreeMap::new();
    for (id, t) in &window.cgroups() {
        if let Some(p) = pods.pod_of(*id) {
            out.entry(p.key())
                .or_insert_with(|| (p.clone(), Traffic::default()))
                .1
                .add(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn links_read_from_sysfs_add_state_speed_and_the_windows_errors() {
        let sys = std::env::temp_dir().join(format!("gryvia-sysnet-{}", std::process::id()));
        for (name, state, speed, rx, tx) in [
            ("ib0", "up", "400000", "7", "1"),
            ("veth1", "down", "-1", "0", "0"),
        ] {
            let dir = sys.join(name).join("statistics");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(sys.join(name).join("operstate"), format!("{state}\n")).unwrap();
            std::fs::write(sys.join(name).join("speed"), format!("{speed}\n")).unwrap();
            std::fs::write(dir.join("rx_errors"), rx).unwrap();
            std::fs::write(dir.join("tx_errors"), tx).unwrap();
        }
        let ib0 = read_link(&sys, "ib0");
        assert_eq!(
            ib0,
            Link {
                oper_state: Some("up".into()),
                speed_mbps: Some(400_000),
                rx_errors: 7,
                tx_errors: 1
            }
        );
        let veth = read_link(&sys, "veth1");
        assert_eq!(
            (veth.oper_state.as_deref(), veth.speed_mbps),
            (Some("down"), None)
        );
        assert_eq!(read_link(&sys, "gone"), Link::default());

        let mut status = GryviaFabricSignalStatus {
            interfaces: ["ib0", "veth1", "gone"]
                .map(|n| InterfaceCounters {
                    name: n.into(),
                    ..Default::default()
                })
                .to_vec(),
            ..Default::default()
        };
        let before = BTreeMap::from([(
            "ib0".to_owned(),
            Link {
                rx_errors: 5,
                tx_errors: 3,
                ..ib0.clone()
            },
        )]);
        let now = BTreeMap::from([("ib0".to_owned(), ib0), ("veth1".to_owned(), veth)]);
        add_links(&mut status, &now, &before);
        let ib = &status.interfaces[0];
        // 7 - 5 received errors in the window; the transmit counter went back (reset): 1.
        assert_eq!(
            (
                ib.oper_state.as_deref(),
                ib.speed_mbps,
                ib.rx_errors,
                ib.tx_errors
            ),
            (Some("up"), Some(400_000), 2, 1)
        );
        assert_eq!(status.interfaces[1].oper_state.as_deref(), Some("down"));
        // No earlier window: the errors since boot are not the window's.
        assert_eq!(status.interfaces[1].rx_errors, 0);
        assert_eq!(status.interfaces[2].oper_state, None);
        std::fs::remove_dir_all(&sys).unwrap();
    }

    use super::*;
    use crate::{FlowKey, Rtt};

    const UID: &str = "1b2c3d4e-0000-4111-8222-333344445555";

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap_or_default())
    }

    fn flow(tx: u64, rx: u64, cgroup: u64) -> Flow {
        Flow {
            traffic: Traffic {
                tx_packets: 1,
                tx_bytes: tx,
                rx_packets: 1,
                rx_bytes: rx,
                ..Traffic::default()
            },
            cgroup_id: cgroup,
            ..Flow::default()
        }
    }

    #[test]
    fn pod_uids_are_found_for_both_cgroup_drivers() {
        let systemd = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_4111_8222_333344445555.slice/cri-containerd-abc.scope";
        assert_eq!(pod_uid_from_cgroup_path(systemd).as_deref(), Some(UID));
        let guaranteed = "/kubepods.slice/kubepods-pod1b2c3d4e_0000_4111_8222_333344445555.slice";
        assert_eq!(pod_uid_from_cgroup_path(guaranteed).as_deref(), Some(UID));
        let cgroupfs = "/kubepods/besteffort/pod1b2c3d4e-0000-4111-8222-333344445555/0123abcd";
        assert_eq!(pod_uid_from_cgroup_path(cgroupfs).as_deref(), Some(UID));
        assert_eq!(pod_uid_from_cgroup_path("/system.slice/sshd.service"), None);
        assert_eq!(
            pod_uid_from_cgroup_path("/kubepods.slice/kubepods-podnotauid.slice"),
            None
        );
    }

    fn resolver() -> PodResolver {
        let mut pods = BTreeMap::new();
        pods.insert(
            UID.to_owned(),
            PodRef {
                namespace: "ml".into(),
                name: "train-0".into(),
                tenant: Some("ml".into()),
            },
        );
        PodResolver {
            cgroups: CgroupIndex::from_pairs([
                (
                    7,
                    format!(
                        "/kubepods.slice/kubepods-pod{}.slice",
                        UID.replace('-', "_")
                    ),
                ),
                (8, "/system.slice/sshd.service".to_owned()),
            ]),
            pods,
        }
    }

    #[test]
    fn the_window_is_the_difference_and_restarts_count_whole() {
        let k = FlowKey::v4(IPPROTO_TCP, [10, 0, 0, 1], 1000, [10, 0, 0, 2], 80);
        let mut a = Snapshot::default();
        a.flows.insert(k, flow(100, 50, 7));
        a.unflowed.insert(7, flow(3, 0, 7).traffic);
        let mut b = a.clone();
        b.flows.insert(k, flow(160, 70, 7));
        b.unflowed.insert(7, flow(5, 0, 7).traffic);
        let d = delta(&a, &b);
        assert_eq!(
            (d.flows[&k].traffic.tx_bytes, d.flows[&k].traffic.rx_bytes),
            (60, 20)
        );
        // The cgroup's window: its flow's and its unflowed traffic's.
        assert_eq!(d.cgroups()[&7].tx_bytes, 62);
        assert_eq!(d.unflowed[&7].tx_bytes, 2);
        assert!(delta(&b, &b).flows.is_empty() && delta(&b, &b).cgroups().is_empty());
        // Evicted and re-created: smaller than before, so all of it is new.
        let mut c = b.clone();
        c.flows.insert(k, flow(10, 5, 7));
        assert_eq!(delta(&b, &c).flows[&k].traffic.tx_bytes, 10);
    }

    #[test]
    fn flows_are_reported_with_their_pods_largest_first_and_capped() {
        let mut w = Snapshot::default();
        let small = FlowKey::v4(IPPROTO_TCP, [10, 0, 0, 1], 1000, [10, 0, 0, 2], 80);
        let big = FlowKey::v4(IPPROTO_UDP, [10, 0, 0, 1], 2000, [10, 0, 0, 3], 53);
        let mut f = flow(10, 10, 7);
        f.tcp.retransmits = 2;
        w.flows.insert(small, f);
        w.flows.insert(big, flow(1000, 0, 8));
        let s = flow_aggregate_status(
            &w,
            &resolver(),
            time("2026-12-02T12:00:00Z"),
            time("2026-12-02T12:00:10Z"),
        );
        assert_eq!(s.flow_count, 2);
        assert_eq!(s.flows[0].dst_port, 53);
        assert_eq!(s.flows[0].protocol, Protocol::UDP);
        assert_eq!(s.flows[0].pod, None);
        assert_eq!(s.flows[1].pod.as_deref(), Some("ml/train-0"));
        assert_eq!(
            (s.flows[1].src_ip.as_str(), s.flows[1].retransmits),
            ("10.0.0.1", 2)
        );

        let mut many = Snapshot::default();
        for p in 0..2500u16 {
            many.flows.insert(
                FlowKey::v4(IPPROTO_TCP, [10, 0, 0, 1], p + 1, [10, 0, 0, 2], 80),
                flow(u64::from(p) + 1, 0, 0),
            );
        }
        let s = flow_aggregate_status(
            &many,
            &PodResolver::default(),
            time("2026-12-02T12:00:00Z"),
            time("2026-12-02T12:00:10Z"),
        );
        assert_eq!((s.flow_count, s.flows.len()), (2500, MAX_FLOW_RECORDS));
        assert_eq!(s.flows[0].tx_bytes, 2500);
    }

    #[test]
    fn the_fabric_signal_has_every_interface_retransmits_and_the_median_rtt() {
        let mut w = Snapshot::default();
        w.interfaces.insert(
            3,
            Traffic {
                rx_packets: 5,
                rx_bytes: 500,
                ..Traffic::default()
            },
        );
        for (i, srtt) in [(1u16, 100u64), (2, 300), (3, 200)] {
            let mut f = flow(1, 1, 0);
            f.rtt = Some(Rtt {
                srtt_us: srtt,
                samples: 1,
                updated_ns: 0,
            });
            f.tcp.retransmits = 1;
            w.flows.insert(
                FlowKey::v4(IPPROTO_TCP, [10, 0, 0, 1], i, [10, 0, 0, 2], 80),
                f,
            );
        }
        let names = BTreeMap::from([(3, "eth1".to_owned()), (4, "eth0".to_owned())]);
        let s = fabric_signal_status(&w, &names, 10, time("2026-12-02T12:00:10Z"));
        assert_eq!(
            s.interfaces
                .iter()
                .map(|i| (i.name.as_str(), i.rx_packets))
                .collect::<Vec<_>>(),
            vec![("eth0", 0), ("eth1", 5)]
        );
        assert_eq!(s.tcp_retransmits, 3);
        assert_eq!(s.median_srtt_micros, Some(200));
        assert_eq!(s.window_seconds, 10);
    }

    #[test]
    fn traffic_is_summed_per_pod() {
        let mut w = Snapshot::default();
        w.unflowed.insert(7, flow(10, 20, 7).traffic);
        w.unflowed.insert(8, flow(99, 99, 8).traffic);
        let p = pod_traffic(&w, &resolver());
        assert_eq!(p.len(), 1);
        assert_eq!(p["ml/train-0"].1.tx_bytes, 10);
        assert_eq!(p["ml/train-0"].0.tenant.as_deref(), Some("ml"));
    }
}
