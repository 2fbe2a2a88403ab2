//! Gryvia's eBPF data plane: the loader and collector library.
//!
//! [`Collector::start`] checks the host (root, kernel BTF, tracefs, cgroup v2), loads the
//! programs of `gryvia-ebpf/programs` (built by this crate's build script and embedded), tells
//! them the tracepoint field offsets it reads from tracefs, and attaches them: cgroup_skb at the
//! cgroup v2 root, three TCP tracepoints, XDP on the chosen interfaces. [`Collector::read`]
//! copies the maps out as [`RawMaps`]; [`Snapshot::from_raw`] turns those into totals per
//! cgroup, per flow and per interface. That split is the seam: everything after the map read is
//! pure and unit-tested without root; the kernel side is tested by `tests/kernel.rs` against
//! real traffic (root).
//!
//! [`report`] turns two snapshots into a window and that into the status of the node's
//! GryviaFabricSignal and GryviaFlowAggregate, joining cgroups to pods by the kubelet's cgroup
//! paths. What it is not: it has no Kubernetes client; listing pods and writing the objects is
//! the collector binary's business (`bins/gryvia-collector`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aya::maps::lpm_trie::{Key as LpmKey, LpmTrie};
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap, PerCpuValues};
use aya::programs::{
    CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, ProgramError, TracePoint, Xdp, XdpMode,
};
use aya::{Ebpf, EbpfLoader};
use gryvia_ebpf_common::{AF_INET, AF_INET6, DENY_EXACT_BITS, IPPROTO_TCP, IPPROTO_UDP, config};
pub use gryvia_ebpf_common::{
    DIRECTION_EGRESS, DIRECTION_INGRESS, DenyKey, FlowKey, FlowTraffic, MAX_DENY_ENTRIES,
    MAX_DENY_RULES, MAX_FLOWS, Rtt, TcpEvents, Traffic,
};

pub mod host;
pub mod report;

/// The compiled programs (one object, with BTF).
static PROGRAMS: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gryvia-ebpf-programs"));

/// The programs object embedded at build time (ELF with BTF), for inspection with `readelf`
/// or `bpftool` and for tools that build a variant of it.
pub fn embedded_object() -> &'static [u8] {
    PROGRAMS
}

/// Errors of the loader, each saying what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading eBPF programs needs root (CAP_BPF and CAP_NET_ADMIN).
    #[error(
        "the collector must run as root (effective uid {0}): loading eBPF programs needs CAP_BPF and CAP_NET_ADMIN"
    )]
    NotRoot(u32),
    /// The kernel exposes no BTF.
    #[error("kernel BTF is missing ({0} does not exist): the kernel needs CONFIG_DEBUG_INFO_BTF")]
    Btf(String),
    /// tracefs is neither mounted nor mountable.
    #[error("tracefs: {0}")]
    Tracefs(String),
    /// A tracepoint lacks a field the programs read.
    #[error("tracepoint {tracepoint}: {reason}")]
    TracepointFormat {
        /// `category/name`.
        tracepoint: String,
        /// What is missing.
        reason: String,
    },
    /// No cgroup v2 hierarchy.
    #[error("cgroup v2: {0}")]
    Cgroup(String),
    /// The object could not be parsed.
    #[error("load the eBPF object: {0}")]
    Object(String),
    /// The kernel refused a program; the verifier's log says why.
    #[error("program {program} failed to load: {reason}")]
    Verifier {
        /// Program name.
        program: String,
        /// The error with the verifier log.
        reason: String,
    },
    /// A program could not be attached.
    #[error("attach {program} to {target}: {reason}")]
    Attach {
        /// Program name.
        program: String,
        /// Where.
        target: String,
        /// Why not.
        reason: String,
    },
    /// An option is out of range.
    #[error("options: {0}")]
    Options(String),
    /// A map could not be read or written.
    #[error("map {map}: {reason}")]
    Map {
        /// Map name.
        map: String,
        /// Why.
        reason: String,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which programs to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Programs {
    /// Per-cgroup and per-flow traffic (cgroup_skb).
    pub cgroup_traffic: bool,
    /// TCP connection lifecycle (`sock/inet_sock_set_state`).
    pub tcp_flows: bool,
    /// Retransmissions and RTT (`tcp/tcp_retransmit_skb`, `tcp/tcp_probe`).
    pub tcp_retransmits: bool,
    /// Frames per interface (XDP).
    pub interface_counters: bool,
}

impl Default for Programs {
    fn default() -> Self {
        Programs {
            cgroup_traffic: true,
            tcp_flows: true,
            tcp_retransmits: true,
            interface_counters: true,
        }
    }
}

/// How to start the collector.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The programs.
    pub programs: Programs,
    /// Where to attach the cgroup programs (the cgroup v2 root when `None`).
    pub cgroup: Option<PathBuf>,
    /// Interfaces the XDP program counts on.
    pub interfaces: Vec<String>,
    /// XDP in generic (skb) mode instead of letting the kernel choose.
    pub xdp_generic: bool,
    /// An object file to load instead of the programs embedded at build time (another build
    /// of `gryvia-ebpf/programs`, e.g. one made for a particular kernel). It must define the
    /// same programs and maps.
    pub object: Option<PathBuf>,
    /// Capacity of each per-flow map (`FLOW_TRAFFIC`, `TCP_EVENTS`, `TCP_RTT`): beyond it the
    /// least recently used flows are evicted. `None`: [`MAX_FLOWS`]. The kernel allocates the
    /// maps whole at load, and the two per-CPU ones hold a value per possible CPU for every
    /// entry (96 bytes a flow per CPU: about 6 MiB per CPU at the default), so a node with many
    /// CPUs and few flows wants a smaller one. At least [`MIN_FLOWS`].
    pub max_flows: Option<u32>,
}

/// The smallest [`Options::max_flows`].
pub const MIN_FLOWS: u32 = 1_024;

/// The maps [`Options::max_flows`] sizes.
const FLOW_MAPS: [&str; 3] = ["FLOW_TRAFFIC", "TCP_EVENTS", "TCP_RTT"];

/// Per-program counters of the kernel (with `kernel.bpf_stats_enabled`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramStats {
    /// Program name.
    pub name: String,
    /// Runs since load.
    pub run_count: u64,
    /// Time spent running, nanoseconds.
    pub run_time_ns: u64,
    /// Size of the translated (verified) program, bytes.
    pub instructions: u32,
}

/// The loaded, attached programs. Dropping it detaches everything.
pub struct Collector {
    ebpf: Ebpf,
    cgroup: PathBuf,
    /// Held while the kernel times every program run (`BPF_ENABLE_STATS`).
    stats: Option<std::os::fd::OwnedFd>,
}

/// An error with its sources, one line (aya puts the errno and the verifier log in them).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn load_err(program: &str) -> impl FnOnce(ProgramError) -> Error + '_ {
    move |e| Error::Verifier {
        program: program.to_owned(),
        reason: chain(&e),
    }
}

fn attach_err<'a>(program: &'a str, target: &'a str) -> impl FnOnce(ProgramError) -> Error + 'a {
    move |e| Error::Attach {
        program: program.to_owned(),
        target: target.to_owned(),
        reason: chain(&e),
    }
}

impl Collector {
    /// Checks the host, loads the programs and attaches those `options` asks for.
    ///
    /// # Errors
    /// [`Error::NotRoot`], [`Error::Btf`], [`Error::Tracefs`], [`Error::Cgroup`] when the host
    /// cannot run them; [`Error::Verifier`] (with the verifier log) when the kernel refuses a
    /// program; [`Error::Attach`] when an interface or cgroup is unusable.
    pub fn start(options: &Options) -> Result<Self> {
        let uid = host::effective_uid();
        if uid != 0 {
            return Err(Error::NotRoot(uid));
        }
        if !Path::new(host::KERNEL_BTF).exists() {
            return Err(Error::Btf(host::KERNEL_BTF.to_owned()));
        }
        let cgroup = match &options.cgroup {
            Some(c) => c.clone(),
            None => host::cgroup2_root().map_err(Error::Cgroup)?,
        };
        let offsets = if options.programs.tcp_flows || options.programs.tcp_retransmits {
            let tracefs = host::ensure_tracefs().map_err(Error::Tracefs)?;
            host::tracepoint_offsets(&tracefs)?
        } else {
            vec![0; config::LEN as usize]
        };
        let object = match &options.object {
            Some(path) => std::borrow::Cow::Owned(
                std::fs::read(path)
                    .map_err(|e| Error::Object(format!("{}: {e}", path.display())))?,
            ),
            None => std::borrow::Cow::Borrowed(PROGRAMS),
        };
        let mut loader = EbpfLoader::new();
        if let Some(n) = options.max_flows {
            if n < MIN_FLOWS {
                return Err(Error::Options(format!(
                    "max flows {n}: at least {MIN_FLOWS} (the per-flow maps evict the least recently used flows beyond it)"
                )));
            }
            for map in FLOW_MAPS {
                loader.map_max_entries(map, n);
            }
        }
        let mut ebpf = loader.load(&object).map_err(|e| Error::Object(chain(&e)))?;
        {
            let map = ebpf.map_mut("CONFIG").ok_or_else(|| Error::Map {
                map: "CONFIG".into(),
                reason: "not in the object".into(),
            })?;
            let mut cfg: Array<&mut MapData, u32> =
                Array::try_from(map).map_err(|e| Error::Map {
                    map: "CONFIG".into(),
                    reason: e.to_string(),
                })?;
            for (i, off) in offsets.iter().enumerate() {
                cfg.set(i as u32, off, 0).map_err(|e| Error::Map {
                    map: "CONFIG".into(),
                    reason: e.to_string(),
                })?;
            }
        }
        if options.programs.cgroup_traffic {
            let target = cgroup.display().to_string();
            let dir = std::fs::File::open(&cgroup).map_err(|e| Error::Attach {
                program: "cgroup_ingress".into(),
                target: target.clone(),
                reason: e.to_string(),
            })?;
            for (name, kind) in [
                ("cgroup_ingress", CgroupSkbAttachType::Ingress),
                ("cgroup_egress", CgroupSkbAttachType::Egress),
            ] {
                let p: &mut CgroupSkb = program(&mut ebpf, name)?;
                p.load().map_err(load_err(name))?;
                // A BPF link (kernel >= 5.7) always coexists with other programs on the
                // cgroup; the kernel refuses the ALLOW_MULTI flag on link creation (EINVAL).
                p.attach(&dir, kind, CgroupAttachMode::Single)
                    .map_err(attach_err(name, &target))?;
            }
        }
        let mut tracepoints = Vec::new();
        if options.programs.tcp_flows {
            tracepoints.push(("tcp_state", "sock", "inet_sock_set_state"));
        }
        if options.programs.tcp_retransmits {
            tracepoints.push(("tcp_retransmit", "tcp", "tcp_retransmit_skb"));
            tracepoints.push(("tcp_probe", "tcp", "tcp_probe"));
        }
        for (name, category, event) in tracepoints {
            let p: &mut TracePoint = program(&mut ebpf, name)?;
            p.load().map_err(load_err(name))?;
            p.attach(category, event)
                .map_err(attach_err(name, &format!("{category}/{event}")))?;
        }
        if options.programs.interface_counters && !options.interfaces.is_empty() {
            let p: &mut Xdp = program(&mut ebpf, "iface_count")?;
            p.load().map_err(load_err("iface_count"))?;
            let flags = if options.xdp_generic {
                XdpMode::Skb
            } else {
                XdpMode::Default
            };
            for iface in &options.interfaces {
                p.attach(iface, flags)
                    .map_err(attach_err("iface_count", iface))?;
            }
        }
        Ok(Collector {
            ebpf,
            cgroup,
            stats: None,
        })
    }

    /// Where the cgroup programs are attached.
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    /// Turns on the kernel's per-program run time and count (`BPF_ENABLE_STATS`) for as long
    /// as the collector lives. The kernel then reads the clock twice around every run of every
    /// eBPF program on the host (ours are per packet), so it is a diagnostic, not a default.
    ///
    /// # Errors
    /// [`Error::Map`] when the kernel refuses.
    pub fn enable_stats(&mut self) -> Result<()> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| Error::Map {
            map: "bpf_stats".into(),
            reason: e.to_string(),
        })?;
        self.stats = Some(fd);
        Ok(())
    }

    /// The capacity of each per-flow map as the kernel loaded it ([`Options::max_flows`]).
    ///
    /// # Errors
    /// [`Error::Map`] when a map is missing or the kernel does not answer.
    pub fn max_flows(&self) -> Result<u32> {
        let mut capacity = u32::MAX;
        for name in FLOW_MAPS {
            let err = |reason: String| Error::Map {
                map: name.into(),
                reason,
            };
            let data = match self.ebpf.map(name) {
                Some(aya::maps::Map::PerCpuLruHashMap(d) | aya::maps::Map::LruHashMap(d)) => d,
                Some(_) => return Err(err("not an LRU hash map".into())),
                None => return Err(err("not in the object".into())),
            };
            let info = data.info().map_err(|e| err(e.to_string()))?;
            capacity = capacity.min(info.max_entries());
        }
        Ok(capacity)
    }

    /// Run counts and run time of every loaded program; none unless
    /// [`Collector::enable_stats`] turned the kernel's statistics on (its counters stay at
    /// zero otherwise).
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        let mut out = Vec::new();
        if self.stats.is_none() {
            return out;
        }
        for (name, p) in self.ebpf.programs() {
            let Ok(info) = p.info() else { continue };
            out.push(ProgramStats {
                name: name.to_owned(),
                run_count: info.run_count(),
                run_time_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                instructions: info.size_translated().unwrap_or(0),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Copies every map out (per-CPU values unsummed).
    ///
    /// # Errors
    /// [`Error::Map`] when a map cannot be read.
    pub fn read(&self) -> Result<RawMaps> {
        use map_err as err;
        use map_ref as map;
        let mut raw = RawMaps::default();
        let m: PerCpuHashMap<&MapData, u64, Traffic> =
            PerCpuHashMap::try_from(map(&self.ebpf, "CGROUP_TRAFFIC")?)
                .map_err(err("CGROUP_TRAFFIC"))?;
        for entry in m.iter() {
            let (k, v) = entry.map_err(err("CGROUP_TRAFFIC"))?;
            raw.cgroup_traffic.push((k, v.iter().copied().collect()));
        }
        let m: PerCpuHashMap<&MapData, FlowKey, FlowTraffic> =
            PerCpuHashMap::try_from(map(&self.ebpf, "FLOW_TRAFFIC")?)
                .map_err(err("FLOW_TRAFFIC"))?;
        for entry in m.iter() {
            let (k, v) = entry.map_err(err("FLOW_TRAFFIC"))?;
            raw.flow_traffic.push((k, v.iter().copied().collect()));
        }
        let m: PerCpuHashMap<&MapData, FlowKey, TcpEvents> =
            PerCpuHashMap::try_from(map(&self.ebpf, "TCP_EVENTS")?).map_err(err("TCP_EVENTS"))?;
        for entry in m.iter() {
            let (k, v) = entry.map_err(err("TCP_EVENTS"))?;
            raw.tcp_events.push((k, v.iter().copied().collect()));
        }
        let m: BpfHashMap<&MapData, FlowKey, Rtt> =
            BpfHashMap::try_from(map(&self.ebpf, "TCP_RTT")?).map_err(err("TCP_RTT"))?;
        for entry in m.iter() {
            raw.rtt.push(entry.map_err(err("TCP_RTT"))?);
        }
        let m: PerCpuHashMap<&MapData, u32, Traffic> =
            PerCpuHashMap::try_from(map(&self.ebpf, "IFACE_TRAFFIC")?)
                .map_err(err("IFACE_TRAFFIC"))?;
        for entry in m.iter() {
            let (k, v) = entry.map_err(err("IFACE_TRAFFIC"))?;
            raw.interfaces.push((k, v.iter().copied().collect()));
        }
        Ok(raw)
    }

    /// [`Collector::read`] turned into totals.
    ///
    /// # Errors
    /// As [`Collector::read`].
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(Snapshot::from_raw(self.read()?))
    }
}

/// One entry of the deny map: packets of `key`'s direction, protocol and port between its local
/// address and a remote address within `key.remote/remote_prefix` are dropped and counted
/// against `rule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DenyEntry {
    /// Direction, protocol (0: any), port (0: any), local address, remote address.
    pub key: DenyKey,
    /// How many leading bits of the remote address count (0 to 32).
    pub remote_prefix: u8,
    /// The rule's index (below [`MAX_DENY_RULES`]): its drop counter.
    pub rule: u32,
}

fn map_err(name: &str) -> impl Fn(aya::maps::MapError) -> Error + '_ {
    move |e| Error::Map {
        map: name.to_owned(),
        reason: e.to_string(),
    }
}

fn map_ref<'a>(ebpf: &'a Ebpf, name: &str) -> Result<&'a aya::maps::Map> {
    ebpf.map(name).ok_or_else(|| Error::Map {
        map: name.to_owned(),
        reason: "not in the object".into(),
    })
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::maps::Map> {
    ebpf.map_mut(name).ok_or_else(|| Error::Map {
        map: name.to_owned(),
        reason: "not in the object".into(),
    })
}

/// The remote address with the bits past `prefix` cleared (the trie keeps keys that way).
fn masked(mut key: DenyKey, prefix: u8) -> DenyKey {
    let bits = u32::from_be_bytes(key.remote);
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    key.remote = (bits & mask).to_be_bytes();
    key
}

impl Collector {
    /// Replaces what the cgroup programs drop with `entries`. Entries in the map and not in
    /// `entries` are removed, new ones added, and the drop counter of every rule index that no
    /// entry used before starts at zero; with no entries the programs skip the deny lookups.
    ///
    /// # Errors
    /// [`Error::Map`] naming the map, when an entry is out of range (too many entries, a rule
    /// index or prefix too large) or the kernel refuses a write.
    pub fn set_deny(&mut self, entries: &[DenyEntry]) -> Result<()> {
        if entries.len() > MAX_DENY_ENTRIES as usize {
            return Err(Error::Map {
                map: "DENY".into(),
                reason: format!(
                    "{} entries, the map holds {MAX_DENY_ENTRIES}",
                    entries.len()
                ),
            });
        }
        if let Some(e) = entries
            .iter()
            .find(|e| e.rule >= MAX_DENY_RULES || e.remote_prefix > 32)
        {
            return Err(Error::Map {
                map: "DENY".into(),
                reason: format!(
                    "rule {} with a /{} prefix: rules go up to {}, prefixes to 32",
                    e.rule,
                    e.remote_prefix,
                    MAX_DENY_RULES - 1
                ),
            });
        }
        let wanted: BTreeMap<(u32, DenyKey), u32> = entries
            .iter()
            .map(|e| {
                (
                    (
                        DENY_EXACT_BITS + u32::from(e.remote_prefix),
                        masked(e.key, e.remote_prefix),
                    ),
                    e.rule,
                )
            })
            .collect();
        if wanted.is_empty() {
            self.set_deny_active(0)?;
        }
        let mut trie: LpmTrie<&mut MapData, DenyKey, u32> =
            LpmTrie::try_from(map_mut(&mut self.ebpf, "DENY")?).map_err(map_err("DENY"))?;
        let mut present = BTreeMap::new();
        for entry in trie.iter() {
            let (k, rule) = entry.map_err(map_err("DENY"))?;
            present.insert((k.prefix_len(), k.data()), rule);
        }
        for (&(prefix, key), &rule) in &wanted {
            if present.get(&(prefix, key)) != Some(&rule) {
                trie.insert(&LpmKey::new(prefix, key), rule, 0)
                    .map_err(map_err("DENY"))?;
            }
        }
        for &(prefix, key) in present.keys() {
            if !wanted.contains_key(&(prefix, key)) {
                trie.remove(&LpmKey::new(prefix, key))
                    .map_err(map_err("DENY"))?;
            }
        }
        let used: std::collections::BTreeSet<u32> = present.values().copied().collect();
        let fresh: std::collections::BTreeSet<u32> = wanted
            .values()
            .copied()
            .filter(|r| !used.contains(r))
            .collect();
        self.reset_drops(&fresh.into_iter().collect::<Vec<_>>())?;
        self.set_deny_active(u32::try_from(wanted.len()).unwrap_or(u32::MAX))
    }

    /// Sets the drop counters of `rules` to zero (a rule index given to another policy).
    ///
    /// # Errors
    /// [`Error::Map`] when the kernel refuses the write or an index is out of range.
    pub fn reset_drops(&mut self, rules: &[u32]) -> Result<()> {
        if rules.is_empty() {
            return Ok(());
        }
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| Error::Map {
            map: "DENY_DROPS".into(),
            reason: format!("{what}: {e}"),
        })?;
        let mut drops: PerCpuArray<&mut MapData, u64> =
            PerCpuArray::try_from(map_mut(&mut self.ebpf, "DENY_DROPS")?)
                .map_err(map_err("DENY_DROPS"))?;
        for &rule in rules {
            let zero = PerCpuValues::try_from(vec![0u64; cpus]).map_err(|e| Error::Map {
                map: "DENY_DROPS".into(),
                reason: e.to_string(),
            })?;
            drops.set(rule, zero, 0).map_err(map_err("DENY_DROPS"))?;
        }
        Ok(())
    }

    fn set_deny_active(&mut self, n: u32) -> Result<()> {
        let mut active: Array<&mut MapData, u32> =
            Array::try_from(map_mut(&mut self.ebpf, "DENY_ACTIVE")?)
                .map_err(map_err("DENY_ACTIVE"))?;
        active.set(0, n, 0).map_err(map_err("DENY_ACTIVE"))
    }

    /// Packets dropped per rule index (summed over CPUs), index 0 first.
    ///
    /// # Errors
    /// [`Error::Map`] when the counters cannot be read.
    pub fn deny_drops(&self) -> Result<Vec<u64>> {
        let drops: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map_ref(&self.ebpf, "DENY_DROPS")?)
                .map_err(map_err("DENY_DROPS"))?;
        drops
            .iter()
            .map(|v| {
                v.map(|per_cpu| per_cpu.iter().sum())
                    .map_err(map_err("DENY_DROPS"))
            })
            .collect()
    }
}

/// One program run by the kernel on a given input (`BPF_PROG_TEST_RUN`): its verdict and the
/// time per run, measured by the kernel around all the repeats (no clock read per run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value (for a cgroup_skb program: 1 passes, 0 drops).
    pub verdict: u32,
    /// Nanoseconds per run, averaged over the repeats.
    pub ns_per_run: u32,
}

/// `union bpf_attr` as `BPF_PROG_TEST_RUN` reads it.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    pad: u32,
}

impl Collector {
    /// Runs the loaded program `name` `repeat` times on `frame` (an Ethernet frame; a cgroup_skb
    /// program sees it from the IP header on, with a socket of this process's cgroup), through
    /// the kernel's `BPF_PROG_TEST_RUN`. Its map updates are real.
    ///
    /// # Errors
    /// [`Error::Object`] when no such program is loaded, [`Error::Map`] (naming the program)
    /// when the kernel refuses the run.
    #[expect(
        unsafe_code,
        reason = "the bpf(2) syscall has no safe wrapper in aya 0.14"
    )]
    pub fn test_run(&self, name: &str, frame: &[u8], repeat: u32) -> Result<TestRun> {
        use std::os::fd::{AsFd, AsRawFd};
        let p = self
            .ebpf
            .program(name)
            .ok_or_else(|| Error::Object(format!("program {name} is not in the object")))?;
        let fd = p
            .fd()
            .map_err(|e| Error::Object(format!("program {name}: {e}")))?;
        let mut attr = TestRunAttr {
            prog_fd: u32::try_from(fd.as_fd().as_raw_fd()).unwrap_or(u32::MAX),
            data_size_in: u32::try_from(frame.len()).unwrap_or(u32::MAX),
            data_in: frame.as_ptr() as u64,
            repeat,
            ..TestRunAttr::default()
        };
        const BPF_PROG_TEST_RUN: libc::c_long = 10;
        // SAFETY: `attr` is the layout the kernel reads for BPF_PROG_TEST_RUN, its input
        // pointer and size describe `frame`, which outlives the call, and no output buffer is
        // given (sizes 0).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &raw mut attr,
                size_of::<TestRunAttr>(),
            )
        };
        if rc != 0 {
            return Err(Error::Map {
                map: format!("test run of {name}"),
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
        Ok(TestRun {
            verdict: attr.retval,
            ns_per_run: attr.duration,
        })
    }
}

/// An Ethernet frame carrying an IPv4 TCP segment of `payload` bytes from `src` to `dst`
/// (no IP options, a 20-byte TCP header): the input of [`Collector::test_run`].
pub fn tcp_frame(src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: usize) -> Vec<u8> {
    let total = u16::try_from(20 + 20 + payload).unwrap_or(u16::MAX);
    let mut f = vec![0u8; 14];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = IPPROTO_TCP;
    ip[12..16].copy_from_slice(&src.0);
    ip[16..20].copy_from_slice(&dst.0);
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&src.1.to_be_bytes());
    tcp[2..4].copy_from_slice(&dst.1.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10; // ACK
    f.extend_from_slice(&tcp);
    f.resize(f.len() + payload, b'x');
    f
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let p = ebpf
        .program_mut(name)
        .ok_or_else(|| Error::Object(format!("program {name} is not in the object")))?;
    p.try_into()
        .map_err(|e: ProgramError| Error::Object(format!("program {name}: {e}")))
}

/// The maps as read, per-CPU values unsummed: the input of [`Snapshot::from_raw`], built by
/// [`Collector::read`] or by a test.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawMaps {
    /// `CGROUP_TRAFFIC`: cgroup id -> per-CPU traffic outside any flow.
    pub cgroup_traffic: Vec<(u64, Vec<Traffic>)>,
    /// `FLOW_TRAFFIC`: flow -> per-CPU traffic.
    pub flow_traffic: Vec<(FlowKey, Vec<FlowTraffic>)>,
    /// `TCP_EVENTS`: flow -> per-CPU events.
    pub tcp_events: Vec<(FlowKey, Vec<TcpEvents>)>,
    /// `TCP_RTT`: flow -> latest RTT.
    pub rtt: Vec<(FlowKey, Rtt)>,
    /// `IFACE_TRAFFIC`: interface index -> per-CPU traffic.
    pub interfaces: Vec<(u32, Vec<Traffic>)>,
}

/// A flow with everything the programs know of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// Packets and bytes from the local socket's side.
    pub traffic: Traffic,
    /// cgroup v2 id of the local socket (0 when only tracepoints saw the flow).
    pub cgroup_id: u64,
    /// TCP lifecycle and retransmissions.
    pub tcp: TcpEvents,
    /// Latest smoothed RTT.
    pub rtt: Option<Rtt>,
}

/// Totals: what the maps say, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Traffic per cgroup id outside any flow (`CGROUP_TRAFFIC`: protocols other than TCP
    /// and UDP, and packets whose flow the full flow map could not store).
    pub unflowed: BTreeMap<u64, Traffic>,
    /// Flows by key.
    pub flows: BTreeMap<FlowKey, Flow>,
    /// Traffic per interface index.
    pub interfaces: BTreeMap<u32, Traffic>,
}

impl Snapshot {
    /// Sums per-CPU values and joins the per-flow maps. Pure.
    ///
    /// # Guarantees
    /// - Counters are the sums over CPUs; `states_seen` is their union.
    /// - A flow's cgroup id is the largest any CPU recorded (each CPU records the same id for
    ///   a socket; CPUs that never saw it hold 0).
    /// - Every key of any per-flow map is a flow of the result.
    pub fn from_raw(raw: RawMaps) -> Self {
        let mut s = Snapshot::default();
        for (id, per_cpu) in raw.cgroup_traffic {
            let t = s.unflowed.entry(id).or_default();
            per_cpu.iter().for_each(|v| t.add(v));
        }
        for (key, per_cpu) in raw.flow_traffic {
            let f = s.flows.entry(key).or_default();
            for v in &per_cpu {
                f.traffic.add(&v.traffic);
                f.cgroup_id = f.cgroup_id.max(v.cgroup_id);
            }
        }
        for (key, per_cpu) in raw.tcp_events {
            let f = s.flows.entry(key).or_default();
            per_cpu.iter().for_each(|v| f.tcp.add(v));
        }
        for (key, rtt) in raw.rtt {
            s.flows.entry(key).or_default().rtt = Some(rtt);
        }
        for (ifindex, per_cpu) in raw.interfaces {
            let t = s.interfaces.entry(ifindex).or_default();
            per_cpu.iter().for_each(|v| t.add(v));
        }
        s
    }

    /// Traffic per cgroup id: [`Snapshot::unflowed`] plus the traffic of each flow under its
    /// cgroup id (a flow without traffic adds no entry).
    pub fn cgroups(&self) -> BTreeMap<u64, Traffic> {
        let mut out = self.unflowed.clone();
        for f in self.flows.values() {
            if f.traffic != Traffic::default() {
                out.entry(f.cgroup_id).or_default().add(&f.traffic);
            }
        }
        out
    }

    /// The flows whose local or remote port is `port`.
    pub fn flows_on_port(&self, port: u16) -> impl Iterator<Item = (&FlowKey, &Flow)> {
        self.flows
            .iter()
            .filter(move |(k, _)| k.local_port == port || k.remote_port == port)
    }
}

/// A flow key as text: `tcp 10.0.0.1:443 -> 10.0.0.2:5000`.
pub fn describe(key: &FlowKey) -> String {
    let proto = match key.protocol {
        IPPROTO_TCP => "tcp",
        IPPROTO_UDP => "udp",
        _ => "ip",
    };
    format!(
        "{proto} {} -> {}",
        socket(key.family, &key.local_addr, key.local_port),
        socket(key.family, &key.remote_addr, key.remote_port)
    )
}

/// An address of a flow key as an [`std::net::IpAddr`].
pub fn ip(family: u16, addr: &[u8; 16]) -> Option<std::net::IpAddr> {
    match family {
        AF_INET => Some(std::net::IpAddr::from([addr[0], addr[1], addr[2], addr[3]])),
        AF_INET6 => Some(std::net::IpAddr::from(*addr)),
        _ => None,
    }
}

fn socket(family: u16, addr: &[u8; 16], port: u16) -> String {
    match ip(family, addr) {
        Some(std::net::IpAddr::V6(a)) => format!("[{a}]:{port}"),
        Some(a) => format!("{a}:{port}"),
        None => format!("?:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rx: u64, tx: u64) -> Traffic {
        Traffic {
            rx_packets: 1,
            rx_bytes: rx,
            tx_packets: 1,
            tx_bytes: tx,
            ..Traffic::default()
        }
    }

    #[test]
    fn per_cpu_values_are_summed_and_flow_maps_joined() {
        let k = FlowKey::v4(IPPROTO_TCP, [10, 0, 0, 1], 40000, [10, 0, 0, 2], 443);
        let raw = RawMaps {
            cgroup_traffic: vec![(7, vec![t(100, 10), Traffic::default(), t(50, 5)])],
            flow_traffic: vec![(
                k,
                vec![
                    FlowTraffic {
                        traffic: t(1, 2),
                        cgroup_id: 7,
                    },
                    FlowTraffic {
                        traffic: t(3, 4),
                        cgroup_id: 0,
                    },
                ],
            )],
            tcp_events: vec![(
                k,
                vec![
                    TcpEvents {
                        established: 1,
                        transitions: 2,
                        states_seen: 0b10,
                        ..Default::default()
                    },
                    TcpEvents {
                        closed: 1,
                        retransmits: 3,
                        transitions: 3,
                        states_seen: 0b1000_0000,
                        ..Default::default()
                    },
                ],
            )],
            rtt: vec![(
                k,
                Rtt {
                    srtt_us: 120,
                    samples: 9,
                    updated_ns: 1,
                },
            )],
            interfaces: vec![(3, vec![t(60, 0), t(40, 0)])],
        };
        let s = Snapshot::from_raw(raw);
        assert_eq!(s.unflowed[&7].rx_bytes, 150);
        assert_eq!(s.unflowed[&7].tx_packets, 2);
        // The cgroup's: its unflowed traffic and its flow's.
        assert_eq!(s.cgroups()[&7].rx_bytes, 154);
        assert_eq!(s.cgroups()[&7].tx_packets, 4);
        let f = &s.flows[&k];
        assert_eq!(
            (f.traffic.rx_bytes, f.traffic.tx_bytes, f.cgroup_id),
            (4, 6, 7)
        );
        assert_eq!(
            (
                f.tcp.established,
                f.tcp.closed,
                f.tcp.retransmits,
                f.tcp.transitions
            ),
            (1, 1, 3, 5)
        );
        assert_eq!(f.tcp.states_seen, 0b1000_0010);
        assert_eq!(f.rtt.map(|r| r.srtt_us), Some(120));
        assert_eq!(s.interfaces[&3].rx_bytes, 100);
        assert_eq!(s.flows_on_port(443).count(), 1);
        assert_eq!(s.flows_on_port(80).count(), 0);
        assert_eq!(describe(&k), "tcp 10.0.0.1:40000 -> 10.0.0.2:443");
    }

    #[test]
    fn a_flow_seen_only_by_tracepoints_has_no_cgroup() {
        let k = FlowKey::v6(IPPROTO_TCP, [0; 16], 1, [0; 16], 2);
        let s = Snapshot::from_raw(RawMaps {
            tcp_events: vec![(
                k,
                vec![TcpEvents {
                    retransmits: 2,
                    ..Default::default()
                }],
            )],
            ..RawMaps::default()
        });
        assert_eq!(s.flows[&k].cgroup_id, 0);
        assert_eq!(s.flows[&k].tcp.retransmits, 2);
        assert_eq!(describe(&k), "tcp [::]:1 -> [::]:2");
    }
}
