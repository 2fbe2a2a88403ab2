//! The node agent's probe of a storage mount: is the path a mount point (from
//! `/proc/self/mountinfo`), how big and how full is its filesystem (statvfs), and how long a
//! small synchronous write, read back and removal take. A hung mount (an NFS server gone) blocks
//! the probe's thread; the caller bounds it with a timeout and reports that.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use gryvia_types::StorageProbe;

/// Bytes written and read back by a probe.
pub const PROBE_BYTES: usize = 4096;
/// The longest a probe may take before it is reported as hung.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `path` is a mount point according to `mountinfo` (the text of
/// `/proc/self/mountinfo`: its fifth field is the mount point, with spaces and such escaped as
/// octal `\040`).
pub fn is_mount_point(mountinfo: &str, path: &Path) -> bool {
    let want = path.to_string_lossy();
    let want = want.trim_end_matches('/');
    let want = if want.is_empty() { "/" } else { want };
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| unescape(m) == want)
}

/// `\NNN` octal escapes of mountinfo, decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Some(digits) = field.get(i + 1..i + 4)
            && let Ok(v) = u8::from_str_radix(digits, 8)
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Probes storage `name` mounted at `mount_path` on the node (blocking): whether that is a
/// mount point in `mountinfo`, then through `path` (the same directory as this process sees
/// it: `mount_path` on the host, under the host root in a pod) capacity and use, and the
/// latency of writing, syncing, reading back and removing a [`PROBE_BYTES`] file named after
/// `node`.
pub fn probe(
    name: &str,
    mount_path: &Path,
    path: &Path,
    node: &str,
    mountinfo: &str,
) -> StorageProbe {
    let mut result = StorageProbe {
        name: name.to_owned(),
        mount_path: mount_path.display().to_string(),
        mounted: is_mount_point(mountinfo, mount_path),
        ..StorageProbe::default()
    };
    match rustix::fs::statvfs(path) {
        Ok(st) => {
            let size = st.f_frsize.max(1);
            let total = st.f_blocks.saturating_mul(size);
            let free = st.f_bfree.saturating_mul(size);
            result.capacity_bytes = i64::try_from(total).ok();
            result.used_bytes = i64::try_from(total.saturating_sub(free)).ok();
        }
        Err(e) => {
            result.error = Some(format!("statvfs {}: {e}", path.display()));
            return result;
        }
    }
    if !result.mounted {
        result.error = Some(format!("{} is not a mount point", mount_path.display()));
        return result;
    }
    let started = Instant::now();
    match write_read_remove(&path.join(format!(".gryvia-probe-{node}"))) {
        Ok(()) => {
            result.latency_millis = i64::try_from(started.elapsed().as_millis()).ok();
        }
        Err(e) => result.error = Some(e),
    }
    result
}

fn write_read_remove(file: &Path) -> Result<(), String> {
    let payload: Vec<u8> = (0..PROBE_BYTES).map(|i| (i % 251) as u8).collect();
    let shown = file.display();
    let mut f = std::fs::File::create(file).map_err(|e| format!("create {shown}: {e}"))?;
    f.write_all(&payload)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("write {shown}: {e}"))?;
    drop(f);
    let mut back = Vec::with_capacity(PROBE_BYTES);
    std::fs::File::open(file)
        .and_then(|mut f| f.read_to_end(&mut back))
        .map_err(|e| format!("read {shown}: {e}"))?;
    std::fs::remove_file(file).map_err(|e| format!("remove {shown}: {e}"))?;
    if back != payload {
        return Err(format!(
            "{shown} read back {} bytes that differ from those written",
            back.len()
        ));
    }
    Ok(())
}

/// [`probe`] on a blocking thread, bounded by `timeout`: a probe that does not return in time
/// is reported as hung (its thread stays blocked on the mount; the next round probes again).
pub async fn probe_bounded(
    name: String,
    mount_path: std::path::PathBuf,
    path: std::path::PathBuf,
    node: String,
    mountinfo: String,
    timeout: Duration,
) -> StorageProbe {
    let shown = mount_path.display().to_string();
    let mounted = is_mount_point(&mountinfo, &mount_path);
    let task = tokio::task::spawn_blocking({
        let name = name.clone();
        move || probe(&name, &mount_path, &path, &node, &mountinfo)
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => StorageProbe {
            name,
            mount_path: shown,
            mounted,
            error: Some(format!("probe failed: {e}")),
            ..StorageProbe::default()
        },
        Err(_) => StorageProbe {
            name,
            mount_path: shown.clone(),
            mounted,
            error: Some(format!(
                "probe of {shown} hung for more than {}s",
                timeout.as_secs()
            )),
            ..StorageProbe::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:31 / /mnt/data\\040sets rw,relatime shared:2 - nfs4 fs:/export rw
36 22 0:32 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw
";

    #[test]
    fn mount_points_come_from_the_fifth_field_with_escapes_decoded() {
        assert!(is_mount_point(MOUNTINFO, Path::new("/mnt/data sets")));
        assert!(is_mount_point(MOUNTINFO, Path::new("/mnt/data sets/")));
        assert!(is_mount_point(MOUNTINFO, Path::new("/")));
        assert!(!is_mount_point(MOUNTINFO, Path::new("/mnt")));
        assert!(!is_mount_point(MOUNTINFO, Path::new("/mnt/data")));
    }

    #[test]
    fn a_directory_that_is_not_a_mount_point_fails_without_being_written() {
        let dir = std::env::temp_dir().join(format!("gryvia-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = probe("data", &dir, &dir, "n1", MOUNTINFO);
        assert!(!p.mounted);
        assert!(p.capacity_bytes.unwrap() > 0);
        assert_eq!(
            p.error.unwrap(),
            format!("{} is not a mount point", dir.display())
        );
        assert_eq!(p.latency_millis, None);
        assert!(!dir.join(".gryvia-probe-n1").exists());
    }

    #[test]
    fn a_mounted_path_is_written_read_back_and_cleaned_up() {
        let dir = std::env::temp_dir().join(format!("gryvia-probe-m-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // This test's directory stands for a mount point in the mountinfo it is given.
        let info = format!("40 22 0:40 / {} rw - tmpfs tmpfs rw\n", dir.display());
        let p = probe("data", &dir, &dir, "n1", &info);
        assert!(p.mounted, "{p:?}");
        assert_eq!(p.error, None);
        assert!(p.latency_millis.is_some());
        assert!(p.used_bytes.unwrap() <= p.capacity_bytes.unwrap());
        assert!(!dir.join(".gryvia-probe-n1").exists());
    }

    #[tokio::test]
    async fn a_probe_that_hangs_is_reported_as_hung_after_the_timeout() {
        let dir = std::env::temp_dir().join(format!("gryvia-probe-h-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A FIFO where the probe file goes: opening it for writing blocks until a reader comes,
        // like a write to a mount whose server is gone.
        let fifo = dir.join(".gryvia-probe-n1");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let info = format!("40 22 0:40 / {} rw - nfs4 fs:/x rw\n", dir.display());
        let p = probe_bounded(
            "data".into(),
            dir.clone(),
            dir.clone(),
            "n1".into(),
            info,
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(
            p.error.as_deref(),
            Some(format!("probe of {} hung for more than 1s", dir.display()).as_str())
        );
        assert!(p.mounted && p.latency_millis.is_none());
        // Release the blocked thread (a reader opens the FIFO; syncing a FIFO then fails).
        drop(std::fs::File::open(&fifo).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_path_says_so() {
        let p = probe(
            "data",
            Path::new("/nonexistent/gryvia"),
            Path::new("/nonexistent/gryvia"),
            "n1",
            MOUNTINFO,
        );
        assert!(!p.mounted);
        assert!(
            p.error
                .unwrap()
                .starts_with("statvfs /nonexistent/gryvia: ")
        );
    }
}
