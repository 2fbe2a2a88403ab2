//! The records Gryvia's eBPF programs write into their maps and the loader reads back.
//!
//! `#![no_std]` and `#[repr(C)]`: the same definitions compile into the eBPF programs
//! (`gryvia-ebpf/programs`, target `bpfel-unknown-none`) and into the userspace loader (feature
//! `user`, which makes them `aya::Pod`). Every record is a plain bundle of integers without
//! implicit padding, so a key hashes the same in the kernel and here. What this crate is not:
//! it holds no logic beyond building keys and adding counters.

#![no_std]

/// `AF_INET`.
pub const AF_INET: u16 = 2;
/// `AF_INET6`.
pub const AF_INET6: u16 = 10;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// Capacity of the per-cgroup traffic map (cgroups on a node).
pub const MAX_CGROUPS: u32 = 16_384;
/// Capacity of the per-flow maps (least recently used flows are evicted beyond it).
pub const MAX_FLOWS: u32 = 65_536;
/// Capacity of the per-interface map.
pub const MAX_INTERFACES: u32 = 256;
/// TCP states (`TCP_ESTABLISHED` = 1 ... `TCP_NEW_SYN_RECV` = 12), rounded up.
pub const TCP_STATES: u32 = 16;

/// Capacity of the deny map (entries: a local address, a remote prefix, a port).
pub const MAX_DENY_ENTRIES: u32 = 65_536;
/// Deny rules with their own drop counter.
pub const MAX_DENY_RULES: u32 = 1_024;
/// A deny entry's bits before the remote address: direction, protocol, port, local address.
pub const DENY_EXACT_BITS: u32 = 64;
/// [`DenyKey::direction`] of packets into the local socket.
pub const DIRECTION_INGRESS: u8 = 0;
/// [`DenyKey::direction`] of packets out of the local socket.
pub const DIRECTION_EGRESS: u8 = 1;

/// `TCP_ESTABLISHED`.
pub const TCP_ESTABLISHED: u32 = 1;
/// `TCP_CLOSE`.
pub const TCP_CLOSE: u32 = 7;

/// Slots of the `CONFIG` array: tracepoint field offsets the loader reads from tracefs
/// `format` files (they differ between kernels, so they are never compiled in).
pub mod config {
    /// `sock/inet_sock_set_state`: `oldstate` (int).
    pub const STATE_OLD: u32 = 0;
    /// `newstate` (int).
    pub const STATE_NEW: u32 = 1;
    /// `sport` (u16, host order).
    pub const STATE_SPORT: u32 = 2;
    /// `dport` (u16, host order).
    pub const STATE_DPORT: u32 = 3;
    /// `family` (u16).
    pub const STATE_FAMILY: u32 = 4;
    /// `protocol` (u16).
    pub const STATE_PROTOCOL: u32 = 5;
    /// `saddr_v6` (16 bytes; an IPv4 socket's is the v4-mapped address).
    pub const STATE_SADDR_V6: u32 = 6;
    /// `daddr_v6` (16 bytes).
    pub const STATE_DADDR_V6: u32 = 7;
    /// `saddr` (4 bytes).
    pub const STATE_SADDR: u32 = 8;
    /// `daddr` (4 bytes).
    pub const STATE_DADDR: u32 = 9;
    /// `tcp/tcp_retransmit_skb`: `sport`.
    pub const RETX_SPORT: u32 = 10;
    /// `dport`.
    pub const RETX_DPORT: u32 = 11;
    /// `family`.
    pub const RETX_FAMILY: u32 = 12;
    /// `saddr` (4 bytes).
    pub const RETX_SADDR: u32 = 13;
    /// `daddr` (4 bytes).
    pub const RETX_DADDR: u32 = 14;
    /// `saddr_v6` (16 bytes).
    pub const RETX_SADDR_V6: u32 = 15;
    /// `daddr_v6` (16 bytes).
    pub const RETX_DADDR_V6: u32 = 16;
    /// `tcp/tcp_probe`: `saddr` (a `sockaddr_in` or `sockaddr_in6`).
    pub const PROBE_SADDR: u32 = 17;
    /// `daddr` (sockaddr).
    pub const PROBE_DADDR: u32 = 18;
    /// `sport`.
    pub const PROBE_SPORT: u32 = 19;
    /// `dport`.
    pub const PROBE_DPORT: u32 = 20;
    /// `family`.
    pub const PROBE_FAMILY: u32 = 21;
    /// `srtt` (u32, microseconds).
    pub const PROBE_SRTT: u32 = 22;
    /// Number of slots.
    pub const LEN: u32 = 23;
}

/// A flow as its local socket sees it: the key of every per-flow map.
///
/// Addresses are in network byte order (an IPv4 address in the first four bytes, the rest
/// zero); ports in host order. 40 bytes, no implicit padding; aligned to 8 so that the eBPF
/// programs write and copy it a word at a time (the BPF instruction set has no misaligned
/// access: a key aligned to 2 is written a byte at a time).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// `AF_INET` or `AF_INET6`.
    pub family: u16,
    /// Local port.
    pub local_port: u16,
    /// Remote port.
    pub remote_port: u16,
    /// IP protocol (`IPPROTO_TCP`, `IPPROTO_UDP`).
    pub protocol: u8,
    /// Always zero (explicit padding).
    pub pad: u8,
    /// Local address.
    pub local_addr: [u8; 16],
    /// Remote address.
    pub remote_addr: [u8; 16],
}

impl FlowKey {
    /// An IPv4 flow.
    pub fn v4(
        protocol: u8,
        local: [u8; 4],
        local_port: u16,
        remote: [u8; 4],
        remote_port: u16,
    ) -> Self {
        let [a, b, c, d] = local;
        let [e, f, g, h] = remote;
        FlowKey {
            family: AF_INET,
            local_port,
            remote_port,
            protocol,
            pad: 0,
            local_addr: [a, b, c, d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            remote_addr: [e, f, g, h, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        }
    }

    /// An IPv6 flow.
    pub fn v6(
        protocol: u8,
        local: [u8; 16],
        local_port: u16,
        remote: [u8; 16],
        remote_port: u16,
    ) -> Self {
        FlowKey {
            family: AF_INET6,
            local_port,
            remote_port,
            protocol,
            pad: 0,
            local_addr: local,
            remote_addr: remote,
        }
    }
}

/// The key data of the `DENY` longest-prefix-match map: the first [`DENY_EXACT_BITS`] bits match
/// exactly, the remote address by prefix. 12 bytes, no implicit padding.
///
/// `protocol` 0 with `port` 0 stands for every protocol and port; addresses in network byte
/// order, the port in host order (the local pod's port for ingress, the remote's for egress).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DenyKey {
    /// [`DIRECTION_INGRESS`] or [`DIRECTION_EGRESS`].
    pub direction: u8,
    /// IP protocol, or 0 for any.
    pub protocol: u8,
    /// The port, or 0 for any.
    pub port: u16,
    /// The local (pod) IPv4 address.
    pub local: [u8; 4],
    /// The remote IPv4 address (only its first `prefix_len - DENY_EXACT_BITS` bits count).
    pub remote: [u8; 4],
}

/// Packets and bytes in both directions. Bytes are `skb->len` (from the IP header on) for
/// cgroup programs and whole frames for the interface program; `*_payload` is what is left
/// after the IP and TCP/UDP headers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Transport payload received.
    pub rx_payload: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Transport payload sent.
    pub tx_payload: u64,
}

impl Traffic {
    /// Adds `other` (summing per-CPU values).
    pub fn add(&mut self, other: &Traffic) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.rx_payload += other.rx_payload;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.tx_payload += other.tx_payload;
    }
}

/// A flow's traffic and the cgroup of its socket (to join it to a pod).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowTraffic {
    /// Packets and bytes.
    pub traffic: Traffic,
    /// cgroup v2 id of the socket (0 when unknown).
    pub cgroup_id: u64,
}

/// TCP events of one flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpEvents {
    /// Transitions into ESTABLISHED.
    pub established: u64,
    /// Transitions into CLOSE.
    pub closed: u64,
    /// State transitions of any kind.
    pub transitions: u64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Bit `s` set when the socket entered state `s`.
    pub states_seen: u64,
}

impl TcpEvents {
    /// Adds `other` (summing per-CPU values).
    pub fn add(&mut self, other: &TcpEvents) {
        self.established += other.established;
        self.closed += other.closed;
        self.transitions += other.transitions;
        self.retransmits += other.retransmits;
        self.states_seen |= other.states_seen;
    }
}

/// The latest smoothed RTT of a flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rtt {
    /// Smoothed RTT, microseconds (the kernel's `srtt_us >> 3`).
    pub srtt_us: u64,
    /// Samples seen (approximate: updated without atomics).
    pub samples: u64,
    /// `bpf_ktime_get_ns` of the latest sample.
    pub updated_ns: u64,
}

#[cfg(feature = "user")]
mod user {
    #![expect(unsafe_code, reason = "aya::Pod is an unsafe marker trait")]
    // SAFETY: every record is #[repr(C)], Copy, made only of integers and byte arrays, without
    // implicit padding (FlowKey pads explicitly), so any bit pattern is a valid value.
    unsafe impl aya::Pod for super::FlowKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Traffic {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FlowTraffic {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TcpEvents {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Rtt {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DenyKey {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn records_have_no_implicit_padding() {
        assert_eq!(size_of::<FlowKey>(), 40);
        assert_eq!(size_of::<DenyKey>(), 12);
        assert_eq!(size_of::<Traffic>(), 48);
        assert_eq!(size_of::<FlowTraffic>(), 56);
        assert_eq!(size_of::<TcpEvents>(), 40);
        assert_eq!(size_of::<Rtt>(), 24);
    }

    #[test]
    fn v4_keys_fill_the_first_four_bytes() {
        let k = FlowKey::v4(IPPROTO_TCP, [127, 0, 0, 1], 40000, [127, 0, 0, 2], 80);
        assert_eq!(&k.local_addr[..5], &[127, 0, 0, 1, 0]);
        assert_eq!(k.remote_addr[3], 2);
        assert_eq!((k.family, k.pad), (AF_INET, 0));
    }
}
