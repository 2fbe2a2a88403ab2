//! Gryvia's eBPF programs. One object, loaded and attached by `gryvia_ebpf::Collector`:
//!
//! - `cgroup_ingress` / `cgroup_egress` (cgroup_skb, attached at the cgroup v2 root): packets,
//!   `skb->len` bytes and transport payload per flow (5-tuple from the local socket's side,
//!   with the socket's cgroup id to join it to a pod) and, for packets of no flow, per cgroup;
//!   the loader sums both per cgroup (so per pod). While the
//!   `DENY` map holds entries (GryviaFlowPolicy `action: deny`), an IPv4 packet that matches
//!   one is dropped and counted per rule in `DENY_DROPS` instead.
//! - `tcp_state` (tracepoint `sock/inet_sock_set_state`): connection lifecycle per flow.
//! - `tcp_retransmit` (tracepoint `tcp/tcp_retransmit_skb`): retransmitted segments per flow.
//! - `tcp_probe` (tracepoint `tcp/tcp_probe`): the smoothed RTT per flow, from the first event
//!   of each end's run of events on a CPU and one in eight after it.
//! - `iface_count` (XDP): frames and bytes per receiving interface.
//!
//! Tracepoint field offsets come from the `CONFIG` map (the loader reads them from tracefs),
//! never compiled in. Counters are per-CPU maps with plain adds (no lost updates, no atomics).

#![no_std]
#![no_main]

use aya_ebpf::bindings::xdp_action;
use aya_ebpf::helpers::{bpf_ktime_get_ns, bpf_skb_cgroup_id};
use aya_ebpf::macros::{cgroup_skb, map, tracepoint, xdp};
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::maps::{Array, LpmTrie, LruHashMap, LruPerCpuHashMap, PerCpuArray, PerCpuHashMap};
use aya_ebpf::programs::{SkBuffContext, TracePointContext, XdpContext};
use gryvia_ebpf_common::{
    AF_INET, AF_INET6, DENY_EXACT_BITS, DIRECTION_EGRESS, DIRECTION_INGRESS, DenyKey, FlowKey,
    FlowTraffic, IPPROTO_TCP, IPPROTO_UDP, MAX_CGROUPS, MAX_DENY_ENTRIES, MAX_DENY_RULES,
    MAX_FLOWS, MAX_INTERFACES, Rtt, TCP_CLOSE, TCP_ESTABLISHED, TCP_STATES, TcpEvents, Traffic,
    config,
};

/// Tracepoint field offsets (see `gryvia_ebpf_common::config`).
#[map]
static CONFIG: Array<u32> = Array::with_max_entries(config::LEN, 0);
/// Traffic per cgroup id outside any flow (other protocols; a flow the full map could not
/// store).
#[map]
static CGROUP_TRAFFIC: PerCpuHashMap<u64, Traffic> =
    PerCpuHashMap::with_max_entries(MAX_CGROUPS, 0);
/// Traffic per flow.
#[map]
static FLOW_TRAFFIC: LruPerCpuHashMap<FlowKey, FlowTraffic> =
    LruPerCpuHashMap::with_max_entries(MAX_FLOWS, 0);
/// TCP events per flow.
#[map]
static TCP_EVENTS: LruPerCpuHashMap<FlowKey, TcpEvents> =
    LruPerCpuHashMap::with_max_entries(MAX_FLOWS, 0);
/// Latest smoothed RTT per flow.
#[map]
static TCP_RTT: LruHashMap<FlowKey, Rtt> = LruHashMap::with_max_entries(MAX_FLOWS, 0);
/// Frames per receiving interface index.
#[map]
static IFACE_TRAFFIC: PerCpuHashMap<u32, Traffic> =
    PerCpuHashMap::with_max_entries(MAX_INTERFACES, 0);

/// Entries in `DENY` (slot 0), written by the loader: 0 skips the deny lookups.
#[map]
static DENY_ACTIVE: Array<u32> = Array::with_max_entries(1, 0);
/// Denied traffic: local address, port and remote prefix -> the rule's index.
#[map]
static DENY: LpmTrie<DenyKey, u32> = LpmTrie::with_max_entries(MAX_DENY_ENTRIES, 0);
/// Packets dropped per rule index.
#[map]
static DENY_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_DENY_RULES, 0);

#[inline(always)]
fn offset(slot: u32) -> usize {
    CONFIG.get(slot).copied().unwrap_or(0) as usize
}

// ----------------------------------------------------------------------------- cgroup_skb

#[cgroup_skb]
pub fn cgroup_ingress(ctx: SkBuffContext) -> i32 {
    count_skb(&ctx, false)
}

#[cgroup_skb]
pub fn cgroup_egress(ctx: SkBuffContext) -> i32 {
    count_skb(&ctx, true)
}

/// Whether a deny entry matches the packet; a match is counted against its rule.
#[inline(always)]
fn denied(key: &FlowKey, egress: bool) -> bool {
    if DENY_ACTIVE.get(0).copied().unwrap_or(0) == 0 || key.family != AF_INET {
        return false;
    }
    let mut k = Key::new(
        DENY_EXACT_BITS + 32,
        DenyKey {
            direction: if egress {
                DIRECTION_EGRESS
            } else {
                DIRECTION_INGRESS
            },
            protocol: key.protocol,
            port: if egress {
                key.remote_port
            } else {
                key.local_port
            },
            local: [
                key.local_addr[0],
                key.local_addr[1],
                key.local_addr[2],
                key.local_addr[3],
            ],
            remote: [
                key.remote_addr[0],
                key.remote_addr[1],
                key.remote_addr[2],
                key.remote_addr[3],
            ],
        },
    );
    let rule = match DENY.get(&k) {
        Some(r) => *r,
        None => {
            // Entries for every protocol and port.
            k.data.protocol = 0;
            k.data.port = 0;
            match DENY.get(&k) {
                Some(r) => *r,
                None => return false,
            }
        }
    };
    if let Some(p) = DENY_DROPS.get_ptr_mut(rule) {
        unsafe { *p += 1 };
    }
    true
}

/// The flow key from the local side and the header length before the payload, read in place
/// from the packet's linear data without a helper call, for an IPv4 header without options
/// before TCP or UDP (so at constant offsets behind one bounds check, which the verifier
/// follows): `None` when the packet is another shape or shorter than the headers' room (then
/// [`parse_loaded`] copies the headers out with `bpf_skb_load_bytes`).
#[inline(always)]
fn parse_direct(ctx: &SkBuffContext, egress: bool) -> Option<(FlowKey, u64)> {
    let skb = ctx.skb.skb;
    let data = unsafe { (*skb).data } as usize;
    let end = unsafe { (*skb).data_end } as usize;
    // IPv4 (20) and a TCP header (20): the room a direct read needs.
    if data + 40 > end {
        return None;
    }
    let vihl = unsafe { *(data as *const u8) };
    if vihl != 0x45 {
        return None;
    }
    let protocol = unsafe { *((data + 9) as *const u8) };
    let header = match protocol {
        IPPROTO_TCP => 20 + ((unsafe { *((data + 32) as *const u8) } >> 4) as u64) * 4,
        IPPROTO_UDP => 28,
        _ => return None,
    };
    // Word loads, as the kernel's own code reads an IP header (a `[u8; 4]` read is four byte
    // loads: the BPF instruction set has no misaligned access and a byte array is aligned to
    // 1). The verifier accepts a packet load at any alignment only where the CPU has efficient
    // unaligned access, and rejects the program elsewhere.
    let word = |at: usize| unsafe { ((data + at) as *const u32).read() };
    let (src, dst, ports) = (word(12), word(16), word(20));
    // The ports as on the wire: the source port in the first two bytes.
    let sport = u16::from_be(ports as u16);
    let dport = u16::from_be((ports >> 16) as u16);
    let key = if egress {
        v4_key(protocol, src, sport, dst, dport)
    } else {
        v4_key(protocol, dst, dport, src, sport)
    };
    Some((key, header))
}

/// `FlowKey::v4` of addresses read as one word each (so still in network byte order in
/// memory), built as the key's five 64-bit words: the safe constructor's byte arrays compile
/// to byte stores and calls to `memset`.
#[inline(always)]
fn v4_key(protocol: u8, local: u32, local_port: u16, remote: u32, remote_port: u16) -> FlowKey {
    let head = u64::from(AF_INET)
        | u64::from(local_port) << 16
        | u64::from(remote_port) << 32
        | u64::from(protocol) << 48;
    // SAFETY: FlowKey is #[repr(C, align(8))], 40 bytes of integers and byte arrays with no
    // padding, so every bit pattern is valid; on this little-endian target these words hold
    // its fields in declaration order (family, local port, remote port, protocol, pad, then
    // each address: the loaded word and twelve zero bytes). The kernel tests check the keys.
    unsafe {
        core::mem::transmute::<[u64; 5], FlowKey>([head, u64::from(local), 0, u64::from(remote), 0])
    }
}

/// [`parse_direct`] of any IPv4 or IPv6 packet, through `bpf_skb_load_bytes`: for another
/// transport the key has no ports and the header length is the IP header's.
#[inline(always)]
fn parse_loaded(ctx: &SkBuffContext, egress: bool) -> Option<(FlowKey, u64)> {
    let vihl: u8 = ctx.load(0).ok()?;
    let (protocol, l4, mut key) = match vihl >> 4 {
        4 => {
            let ihl = ((vihl & 0x0f) as usize) * 4;
            let protocol: u8 = ctx.load(9).ok()?;
            let src: [u8; 4] = ctx.load(12).ok()?;
            let dst: [u8; 4] = ctx.load(16).ok()?;
            let (l, r) = if egress { (src, dst) } else { (dst, src) };
            (protocol, ihl, FlowKey::v4(protocol, l, 0, r, 0))
        }
        6 => {
            let protocol: u8 = ctx.load(6).ok()?;
            let src: [u8; 16] = ctx.load(8).ok()?;
            let dst: [u8; 16] = ctx.load(24).ok()?;
            let (l, r) = if egress { (src, dst) } else { (dst, src) };
            (protocol, 40, FlowKey::v6(protocol, l, 0, r, 0))
        }
        _ => return None,
    };
    let header = match protocol {
        IPPROTO_TCP => {
            let doff: u8 = ctx.load(l4 + 12).ok()?;
            l4 + ((doff >> 4) as usize) * 4
        }
        IPPROTO_UDP => l4 + 8,
        _ => return Some((key, l4 as u64)),
    };
    let sport = u16::from_be(ctx.load::<u16>(l4).ok()?);
    let dport = u16::from_be(ctx.load::<u16>(l4 + 2).ok()?);
    (key.local_port, key.remote_port) = if egress {
        (sport, dport)
    } else {
        (dport, sport)
    };
    Some((key, header as u64))
}

/// Counts the packet and returns the verdict (1 passes it, 0 drops it). A TCP or UDP packet
/// is counted once, on its flow, which carries its socket's cgroup id (the loader sums each
/// cgroup's flows): one map update per packet, and the cgroup id is read only when the flow
/// is new on this CPU. Any other packet, or one whose flow the map could not store, is
/// counted on its cgroup. Each parse goes to a copy of [`count_parsed`] of its own: one key
/// merged from the two is carried a byte at a time.
#[inline(always)]
fn count_skb(ctx: &SkBuffContext, egress: bool) -> i32 {
    let len = ctx.len() as u64;
    if let Some((key, header)) = parse_direct(ctx, egress) {
        return count_parsed(ctx, &key, header, len, egress);
    }
    if let Some((key, header)) = parse_loaded(ctx, egress) {
        return count_parsed(ctx, &key, header, len, egress);
    }
    count_cgroup(
        unsafe { bpf_skb_cgroup_id(ctx.skb.skb) },
        &traffic(len, 0, egress),
    );
    1
}

/// One packet's traffic in its direction.
#[inline(always)]
fn traffic(len: u64, payload: u64, egress: bool) -> Traffic {
    let mut t = Traffic::default();
    if egress {
        t.tx_packets = 1;
        t.tx_bytes = len;
        t.tx_payload = payload;
    } else {
        t.rx_packets = 1;
        t.rx_bytes = len;
        t.rx_payload = payload;
    }
    t
}

/// [`count_skb`] of a packet whose headers were read: `header` bytes before the payload.
#[inline(always)]
fn count_parsed(ctx: &SkBuffContext, key: &FlowKey, header: u64, len: u64, egress: bool) -> i32 {
    if denied(key, egress) {
        return 0;
    }
    let payload = if len > header { len - header } else { 0 };
    let t = traffic(len, payload, egress);
    if key.protocol != IPPROTO_TCP && key.protocol != IPPROTO_UDP {
        count_cgroup(unsafe { bpf_skb_cgroup_id(ctx.skb.skb) }, &t);
        return 1;
    }
    if let Some(p) = FLOW_TRAFFIC.get_ptr_mut(key) {
        unsafe {
            (*p).traffic.add(&t);
            // A flow another CPU created holds zeros on this one.
            if (*p).cgroup_id == 0 {
                (*p).cgroup_id = bpf_skb_cgroup_id(ctx.skb.skb);
            }
        }
        return 1;
    }
    let cgroup = unsafe { bpf_skb_cgroup_id(ctx.skb.skb) };
    let flow = FlowTraffic {
        traffic: t,
        cgroup_id: cgroup,
    };
    if FLOW_TRAFFIC.insert(key, &flow, 0).is_err() {
        count_cgroup(cgroup, &t);
    }
    1
}

/// Adds `t` to the traffic of `cgroup` outside any flow.
#[inline(always)]
fn count_cgroup(cgroup: u64, t: &Traffic) {
    match CGROUP_TRAFFIC.get_ptr_mut(cgroup) {
        Some(p) => unsafe { (*p).add(t) },
        None => {
            let _ = CGROUP_TRAFFIC.insert(cgroup, *t, 0);
        }
    }
}

// ----------------------------------------------------------------------------- tracepoints

/// The flow key of a TCP socket from a tracepoint's fields.
#[inline(always)]
fn tracepoint_key(
    ctx: &TracePointContext,
    family_slot: u32,
    sport_slot: u32,
    dport_slot: u32,
    saddr_slot: u32,
    daddr_slot: u32,
    saddr6_slot: u32,
    daddr6_slot: u32,
) -> Option<FlowKey> {
    let family: u16 = unsafe { ctx.read_at(offset(family_slot)) }.ok()?;
    let sport: u16 = unsafe { ctx.read_at(offset(sport_slot)) }.ok()?;
    let dport: u16 = unsafe { ctx.read_at(offset(dport_slot)) }.ok()?;
    match family {
        AF_INET => {
            let s: u32 = unsafe { ctx.read_at(offset(saddr_slot)) }.ok()?;
            let d: u32 = unsafe { ctx.read_at(offset(daddr_slot)) }.ok()?;
            Some(v4_key(IPPROTO_TCP, s, sport, d, dport))
        }
        AF_INET6 => {
            let s: [u8; 16] = unsafe { ctx.read_at(offset(saddr6_slot)) }.ok()?;
            let d: [u8; 16] = unsafe { ctx.read_at(offset(daddr6_slot)) }.ok()?;
            Some(FlowKey::v6(IPPROTO_TCP, s, sport, d, dport))
        }
        _ => None,
    }
}

#[inline(always)]
fn add_events(key: &FlowKey, e: &TcpEvents) {
    match TCP_EVENTS.get_ptr_mut(key) {
        Some(p) => unsafe { (*p).add(e) },
        None => {
            let _ = TCP_EVENTS.insert(key, e, 0);
        }
    }
}

#[tracepoint]
pub fn tcp_state(ctx: TracePointContext) -> u32 {
    let _ = try_tcp_state(&ctx);
    0
}

#[inline(always)]
fn try_tcp_state(ctx: &TracePointContext) -> Option<()> {
    let protocol: u16 = unsafe { ctx.read_at(offset(config::STATE_PROTOCOL)) }.ok()?;
    if protocol != IPPROTO_TCP as u16 {
        return None;
    }
    let new: i32 = unsafe { ctx.read_at(offset(config::STATE_NEW)) }.ok()?;
    if !(0..TCP_STATES as i32).contains(&new) {
        return None;
    }
    let key = tracepoint_key(
        ctx,
        config::STATE_FAMILY,
        config::STATE_SPORT,
        config::STATE_DPORT,
        config::STATE_SADDR,
        config::STATE_DADDR,
        config::STATE_SADDR_V6,
        config::STATE_DADDR_V6,
    )?;
    if key.local_port == 0 {
        // CLOSE -> SYN_SENT of a connecting socket: its local port is not chosen yet, so the
        // event belongs to no flow.
        return None;
    }
    let new = new as u32;
    let e = TcpEvents {
        established: u64::from(new == TCP_ESTABLISHED),
        closed: u64::from(new == TCP_CLOSE),
        transitions: 1,
        retransmits: 0,
        states_seen: 1u64 << new,
    };
    add_events(&key, &e);
    Some(())
}

#[tracepoint]
pub fn tcp_retransmit(ctx: TracePointContext) -> u32 {
    let _ = try_tcp_retransmit(&ctx);
    0
}

#[inline(always)]
fn try_tcp_retransmit(ctx: &TracePointContext) -> Option<()> {
    let key = tracepoint_key(
        ctx,
        config::RETX_FAMILY,
        config::RETX_SPORT,
        config::RETX_DPORT,
        config::RETX_SADDR,
        config::RETX_DADDR,
        config::RETX_SADDR_V6,
        config::RETX_DADDR_V6,
    )?;
    add_events(
        &key,
        &TcpEvents {
            retransmits: 1,
            ..TcpEvents::default()
        },
    );
    Some(())
}

/// Of a run of `tcp_probe` events of one end of a connection on a CPU (a transfer's ACKs), the
/// first and then one in this many update the flow's RTT: the event fires for every segment a
/// socket receives while its smoothed RTT moves slowly (the kernel smooths it over eight
/// samples), so the skipped ones cost one read instead of five and a map update; each end's
/// first event on a CPU is always taken, so every flow has a sample.
const PROBE_SAMPLE: u64 = 8;

/// Per CPU and end (slot 0: the end whose port is the lower, 1: the other): the connection's
/// ports, lower first (high 32 bits), and how many of that end's events came in a row
/// (low 32 bits). On loopback both ends' events come in turn on one CPU; a slot each keeps
/// their runs apart.
#[map]
static PROBE_LAST: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

#[tracepoint]
pub fn tcp_probe(ctx: TracePointContext) -> u32 {
    let _ = sampled_tcp_probe(&ctx);
    0
}

#[inline(always)]
fn sampled_tcp_probe(ctx: &TracePointContext) -> Option<()> {
    let at = offset(config::PROBE_SPORT);
    let (sport, dport) = if offset(config::PROBE_DPORT) == at + 2 {
        // Side by side (as in every kernel's format so far): one read for both.
        let both: [u8; 4] = unsafe { ctx.read_at(at) }.ok()?;
        (
            u16::from_ne_bytes([both[0], both[1]]),
            u16::from_ne_bytes([both[2], both[3]]),
        )
    } else {
        let sport: u16 = unsafe { ctx.read_at(at) }.ok()?;
        let dport: u16 = unsafe { ctx.read_at(offset(config::PROBE_DPORT)) }.ok()?;
        (sport, dport)
    };
    let (lo, hi, end) = if sport < dport {
        (sport, dport, 0)
    } else {
        (dport, sport, 1)
    };
    let ports = (u64::from(lo) << 16 | u64::from(hi)) << 32;
    let last = PROBE_LAST.get_ptr_mut(end)?;
    let prev = unsafe { *last };
    let run = if prev & !0xffff_ffff == ports {
        (prev & 0xffff_ffff) + 1
    } else {
        0
    };
    unsafe { *last = ports | (run & 0xffff_ffff) };
    if run % PROBE_SAMPLE != 0 {
        return None;
    }
    try_tcp_probe(ctx, sport, dport)
}

#[inline(always)]
fn try_tcp_probe(ctx: &TracePointContext, sport: u16, dport: u16) -> Option<()> {
    let family: u16 = unsafe { ctx.read_at(offset(config::PROBE_FAMILY)) }.ok()?;
    let srtt: u32 = unsafe { ctx.read_at(offset(config::PROBE_SRTT)) }.ok()?;
    // saddr / daddr are a sockaddr_in (address at 4) or sockaddr_in6 (address at 8): only the
    // address is read.
    let (saddr, daddr) = (offset(config::PROBE_SADDR), offset(config::PROBE_DADDR));
    let key = match family {
        AF_INET => {
            let s: u32 = unsafe { ctx.read_at(saddr + 4) }.ok()?;
            let d: u32 = unsafe { ctx.read_at(daddr + 4) }.ok()?;
            v4_key(IPPROTO_TCP, s, sport, d, dport)
        }
        AF_INET6 => {
            let s: [u8; 16] = unsafe { ctx.read_at(saddr + 8) }.ok()?;
            let d: [u8; 16] = unsafe { ctx.read_at(daddr + 8) }.ok()?;
            FlowKey::v6(IPPROTO_TCP, s, sport, d, dport)
        }
        _ => return None,
    };
    let now = unsafe { bpf_ktime_get_ns() };
    match TCP_RTT.get_ptr_mut(&key) {
        Some(p) => unsafe {
            (*p).srtt_us = u64::from(srtt);
            (*p).samples += 1;
            (*p).updated_ns = now;
        },
        None => {
            let r = Rtt {
                srtt_us: u64::from(srtt),
                samples: 1,
                updated_ns: now,
            };
            let _ = TCP_RTT.insert(&key, &r, 0);
        }
    }
    Some(())
}

// ----------------------------------------------------------------------------- XDP

#[xdp]
pub fn iface_count(ctx: XdpContext) -> u32 {
    let len = (ctx.data_end() - ctx.data()) as u64;
    let ifindex = ctx.ingress_ifindex() as u32;
    let t = Traffic {
        rx_packets: 1,
        rx_bytes: len,
        ..Traffic::default()
    };
    match IFACE_TRAFFIC.get_ptr_mut(ifindex) {
        Some(p) => unsafe { (*p).add(&t) },
        None => {
            let _ = IFACE_TRAFFIC.insert(ifindex, t, 0);
        }
    }
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // eBPF programs cannot unwind; the verifier proves no panic path is reachable.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
