//! What the programs need of the host, found rather than assumed: the effective uid, kernel
//! BTF, the cgroup v2 mount (`/sys/fs/cgroup` or, on hybrid hosts, `/sys/fs/cgroup/unified`),
//! tracefs (mounted here when it is not), and the tracepoint field offsets. The parsers are
//! pure and unit-tested with the format files of a real kernel (`tests/data/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gryvia_ebpf_common::config;

use crate::Error;

/// Where the kernel exposes its BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The effective uid of this process (from `/proc/self/status`; `u32::MAX` when unreadable).
pub fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Mount points of a filesystem type in a `/proc/self/mountinfo` text, in mount order.
pub fn mounts_of(mountinfo: &str, fstype: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // "<id> <parent> <dev> <root> <mount point> <opts> [optional...] - <fstype> <src> <opts>"
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next()? == fstype)
                .then(|| PathBuf::from(unescape(mount_point)))
        })
        .collect()
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as octal (`\040`).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(char::from(v));
            i += 4;
            continue;
        }
        out.push(char::from(bytes[i]));
        i += 1;
    }
    out
}

/// The cgroup v2 mount point.
///
/// # Errors
/// A message when `/proc/self/mountinfo` is unreadable or lists no cgroup2 mount.
pub fn cgroup2_root() -> Result<PathBuf, String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
    mounts_of(&info, "cgroup2")
        .into_iter()
        .next()
        .ok_or_else(|| "no cgroup2 filesystem is mounted (see /proc/self/mountinfo)".to_owned())
}

/// The cgroup id of a cgroup v2 directory: its inode number, which is what
/// `bpf_skb_cgroup_id` returns.
///
/// # Errors
/// When the directory cannot be read.
pub fn cgroup_id(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(dir)?.ino())
}

/// A mounted tracefs with its `events` directory, if there is one.
pub fn mounted_tracefs() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts_of(&info, "tracefs")
        .into_iter()
        .find(|p| p.join("events").is_dir())
}

/// A tracefs where the event formats can be read: a mounted one, or `/sys/kernel/tracing`
/// mounted now (which stays mounted: tracepoints need it for as long as they are attached).
///
/// # Errors
/// A message when no tracefs is mounted and mounting one fails.
pub fn ensure_tracefs() -> Result<PathBuf, String> {
    if let Some(p) = mounted_tracefs() {
        return Ok(p);
    }
    let target = Path::new("/sys/kernel/tracing");
    let out = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev"])
        .arg(target)
        .output()
        .map_err(|e| format!("tracefs is not mounted and running mount failed: {e}"))?;
    if !out.status.success() || !target.join("events").is_dir() {
        return Err(format!(
            "tracefs is not mounted and `mount -t tracefs nodev {}` failed: {}",
            target.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(target.to_path_buf())
}

/// Field name -> (offset, size) of a tracepoint `format` file.
pub fn parse_format(text: &str) -> BTreeMap<String, (u32, u32)> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let Some(decl) = parts.next() else { continue };
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        // "unsigned short common_type", "__u8 saddr[4]", "const void * skaddr"
        let Some(name) = decl
            .rsplit(|c: char| c.is_whitespace() || c == '*')
            .next()
            .map(|n| n.split('[').next().unwrap_or(n))
        else {
            continue;
        };
        if let (Some(o), Some(s)) = (offset, size) {
            fields.insert(name.to_owned(), (o, s));
        }
    }
    fields
}

/// A field the programs read: name, `CONFIG` slot, size in bytes.
type Field = (&'static str, u32, u32);

/// The `CONFIG` slots of the three tracepoints from their format files.
///
/// `formats` maps `category/name` to the format text. Each field must exist with the size the
/// programs read.
///
/// # Errors
/// [`Error::TracepointFormat`] naming the tracepoint and field that is missing or differs.
pub fn offsets_from(formats: &BTreeMap<String, String>) -> Result<Vec<u32>, Error> {
    let mut slots = vec![0u32; config::LEN as usize];
    let wanted: [(&str, &[Field]); 3] = [
        (
            "sock/inet_sock_set_state",
            &[
                ("oldstate", config::STATE_OLD, 4),
                ("newstate", config::STATE_NEW, 4),
                ("sport", config::STATE_SPORT, 2),
                ("dport", config::STATE_DPORT, 2),
                ("family", config::STATE_FAMILY, 2),
                ("protocol", config::STATE_PROTOCOL, 2),
                ("saddr_v6", config::STATE_SADDR_V6, 16),
                ("daddr_v6", config::STATE_DADDR_V6, 16),
                ("saddr", config::STATE_SADDR, 4),
                ("daddr", config::STATE_DADDR, 4),
            ],
        ),
        (
            "tcp/tcp_retransmit_skb",
            &[
                ("sport", config::RETX_SPORT, 2),
                ("dport", config::RETX_DPORT, 2),
                ("family", config::RETX_FAMILY, 2),
                ("saddr", config::RETX_SADDR, 4),
                ("daddr", config::RETX_DADDR, 4),
                ("saddr_v6", config::RETX_SADDR_V6, 16),
                ("daddr_v6", config::RETX_DADDR_V6, 16),
            ],
        ),
        (
            "tcp/tcp_probe",
            &[
                ("saddr", config::PROBE_SADDR, 28),
                ("daddr", config::PROBE_DADDR, 28),
                ("sport", config::PROBE_SPORT, 2),
                ("dport", config::PROBE_DPORT, 2),
                ("family", config::PROBE_FAMILY, 2),
                ("srtt", config::PROBE_SRTT, 4),
            ],
        ),
    ];
    for (tracepoint, fields) in wanted {
        let text = formats
            .get(tracepoint)
            .ok_or_else(|| Error::TracepointFormat {
                tracepoint: tracepoint.to_owned(),
                reason: "no format file (is the tracepoint in this kernel?)".to_owned(),
            })?;
        let parsed = parse_format(text);
        for (field, slot, size) in fields {
            match parsed.get(*field) {
                Some((offset, s)) if s == size => slots[*slot as usize] = *offset,
                Some((_, s)) => {
                    return Err(Error::TracepointFormat {
                        tracepoint: tracepoint.to_owned(),
                        reason: format!("field {field} has size {s}, the programs read {size}"),
                    });
                }
                None => {
                    return Err(Error::TracepointFormat {
                        tracepoint: tracepoint.to_owned(),
                        reason: format!("no field {field}"),
                    });
                }
            }
        }
    }
    Ok(slots)
}

/// Reads the three format files under `tracefs` and returns the `CONFIG` slots.
///
/// # Errors
/// [`Error::TracepointFormat`] when a file is missing or lacks a field.
pub fn tracepoint_offsets(tracefs: &Path) -> Result<Vec<u32>, Error> {
    let mut formats = BTreeMap::new();
    for tp in [
        "sock/inet_sock_set_state",
        "tcp/tcp_retransmit_skb",
        "tcp/tcp_probe",
    ] {
        let path = tracefs.join("events").join(tp).join("format");
        if let Ok(text) = std::fs::read_to_string(&path) {
            formats.insert(tp.to_owned(), text);
        }
    }
    offsets_from(&formats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formats() -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert(
            "sock/inet_sock_set_state".to_owned(),
            include_str!("../tests/data/inet_sock_set_state.format").to_owned(),
        );
        m.insert(
            "tcp/tcp_retransmit_skb".to_owned(),
            include_str!("../tests/data/tcp_retransmit_skb.format").to_owned(),
        );
        m.insert(
            "tcp/tcp_probe".to_owned(),
            include_str!("../tests/data/tcp_probe.format").to_owned(),
        );
        m
    }

    #[test]
    fn format_files_of_a_real_kernel_parse() {
        let f = parse_format(include_str!("../tests/data/inet_sock_set_state.format"));
        assert_eq!(f["common_type"], (0, 2));
        assert_eq!(f["skaddr"], (8, 8));
        assert_eq!(f["oldstate"], (16, 4));
        assert_eq!(f["saddr"], (32, 4));
        assert_eq!(f["daddr_v6"], (56, 16));
    }

    #[test]
    fn offsets_fill_every_slot_from_the_formats() {
        let slots = offsets_from(&formats()).unwrap_or_default();
        assert_eq!(slots.len(), config::LEN as usize);
        assert_eq!(slots[config::STATE_NEW as usize], 20);
        assert_eq!(slots[config::STATE_PROTOCOL as usize], 30);
        assert_eq!(slots[config::RETX_SPORT as usize], 28);
        assert_eq!(slots[config::RETX_DADDR_V6 as usize], 58);
        assert_eq!(slots[config::PROBE_SRTT as usize], 100);
        assert_eq!(slots[config::PROBE_DADDR as usize], 36);
    }

    #[test]
    fn a_missing_field_or_tracepoint_is_named() {
        let mut f = formats();
        let probe = f["tcp/tcp_probe"].replace("field:__u32 srtt;", "field:__u32 srtt_gone;");
        f.insert("tcp/tcp_probe".to_owned(), probe);
        let err = offsets_from(&f).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("tracepoint tcp/tcp_probe: no field srtt")
        );
        f.remove("tcp/tcp_retransmit_skb");
        let err = offsets_from(&f).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "tracepoint tcp/tcp_retransmit_skb: no format file (is the tracepoint in this kernel?)"
            )
        );
    }

    #[test]
    fn cgroup2_and_tracefs_mounts_are_found_in_mountinfo() {
        let info = "24 29 0:22 / /sys rw,nosuid - sysfs sysfs rw\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    90 24 0:12 / /sys/kernel/tracing rw,relatime - tracefs nodev rw\n\
                    91 24 0:40 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mounts_of(info, "cgroup2"),
            vec![
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/mnt/with space")
            ]
        );
        assert_eq!(
            mounts_of(info, "tracefs"),
            vec![PathBuf::from("/sys/kernel/tracing")]
        );
        assert!(mounts_of(info, "bpf").is_empty());
    }

    #[test]
    fn the_effective_uid_is_read() {
        assert_ne!(effective_uid(), u32::MAX);
    }
}
