//! `gryvia-program-cost [--object FILE] [--repeat N] [--deny-entries N]`: what one run of each
//! cgroup program costs, as the kernel measures it (`BPF_PROG_TEST_RUN`, the time around all
//! the repeats, so no clock read per run is counted): a 1,448-byte TCP segment of one flow,
//! again and again (its flow and cgroup entries exist after the first run, as in a long
//! transfer). With `--deny-entries N`, N deny entries that do not match are loaded first (the
//! lookups a packet then pays). `--object` loads another build of the programs (a "before"
//! figure). Prints one JSON line. Root; the programs are attached to an empty cgroup of their
//! own, so no other traffic runs them.

use std::path::PathBuf;

use gryvia_ebpf::{
    Collector, DIRECTION_EGRESS, DenyEntry, DenyKey, Options, Programs, host, tcp_frame,
};

fn main() {
    match run() {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("gryvia-program-cost: {e}");
            std::process::exit(1);
        }
    }
}

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, String> {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .ok_or_else(|| format!("{name}: missing value"))?
            .parse()
            .map_err(|_| format!("{name}: {:?} is not valid", args[i + 1])),
        None => Ok(default),
    }
}

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let repeat: u32 = flag(&args, "--repeat", 1_000_000)?;
    let deny_entries: u32 = flag(&args, "--deny-entries", 0)?;
    let object: Option<PathBuf> = match flag(&args, "--object", String::new())? {
        o if o.is_empty() => None,
        o => Some(PathBuf::from(o)),
    };
    let root = host::cgroup2_root()?;
    let cgroup = root.join(format!("gryvia-program-cost-{}", std::process::id()));
    std::fs::create_dir(&cgroup).map_err(|e| format!("{}: {e}", cgroup.display()))?;
    let result = measure(&cgroup, object, repeat, deny_entries);
    let _ = std::fs::remove_dir(&cgroup);
    result
}

fn measure(
    cgroup: &std::path::Path,
    object: Option<PathBuf>,
    repeat: u32,
    deny_entries: u32,
) -> Result<String, String> {
    let mut c = Collector::start(&Options {
        programs: Programs {
            cgroup_traffic: true,
            tcp_flows: false,
            tcp_retransmits: false,
            interface_counters: false,
        },
        cgroup: Some(cgroup.to_path_buf()),
        object,
        ..Options::default()
    })
    .map_err(|e| e.to_string())?;
    if deny_entries > 0 {
        let entries: Vec<DenyEntry> = (0..deny_entries)
            .map(|i| DenyEntry {
                key: DenyKey {
                    direction: DIRECTION_EGRESS,
                    protocol: 6,
                    port: 9,
                    local: [10, 99, (i >> 8) as u8, i as u8],
                    remote: [10, 98, 0, 0],
                },
                remote_prefix: 16,
                rule: i % 1024,
            })
            .collect();
        // An older object may lack the deny maps: then there is nothing to load.
        c.set_deny(&entries).map_err(|e| e.to_string())?;
    }
    let frame = tcp_frame(([10, 1, 0, 1], 40_000), ([10, 1, 0, 2], 5201), 1448);
    let mut out = serde_json::Map::new();
    for program in ["cgroup_egress", "cgroup_ingress"] {
        let mut runs: Vec<u32> = (0..5)
            .map(|_| c.test_run(program, &frame, repeat).map(|r| r.ns_per_run))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        runs.sort_unstable();
        out.insert(
            program.to_owned(),
            serde_json::json!({"nsPerRunMedian": runs[2], "runs": runs}),
        );
    }
    out.insert("repeat".into(), repeat.into());
    out.insert("denyEntries".into(), deny_entries.into());
    Ok(serde_json::Value::Object(out).to_string())
}
