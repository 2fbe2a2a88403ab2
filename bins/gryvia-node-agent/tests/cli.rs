//! The agent binary's failures before it touches a cluster: no GPU, bad trace, bad flags.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

fn agent(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gryvia-node-agent"))
        .args(args)
        // No cluster is needed for these failures; make sure none is used by accident.
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_a_gpu_the_nvml_source_exits_with_a_clear_message() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("skipping: this machine has an NVIDIA driver");
        return;
    }
    let (ok, stderr) = agent(&["--node", "n1", "--source", "nvml"]);
    assert!(!ok);
    assert!(stderr.contains("read GPUs: load NVML"), "{stderr}");
    assert!(
        stderr.contains("use --source file:PATH to replay a trace"),
        "{stderr}"
    );
}

#[test]
fn a_bad_trace_is_rejected_naming_the_file_and_field() {
    let dir = std::env::temp_dir().join(format!("gryvia-agent-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.yaml");
    std::fs::write(&path, "frames:\n  - gpus: [{index: 0, temprature: 99}]\n").unwrap();
    let (ok, stderr) = agent(&[
        "--node",
        "n1",
        "--source",
        &format!("file:{}", path.display()),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!("trace {}", path.display())),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field \"temprature\""), "{stderr}");
    let (ok, stderr) = agent(&["--node", "n1", "--source", "file:/nonexistent/trace.yaml"]);
    assert!(!ok);
    assert!(stderr.contains("trace /nonexistent/trace.yaml"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_source_or_interval_is_refused() {
    let (ok, stderr) = agent(&["--node", "n1", "--source", "dcgm"]);
    assert!(!ok);
    assert!(
        stderr.contains("--source must be `nvml` or `file:PATH`"),
        "{stderr}"
    );
    let (ok, stderr) = agent(&["--node", "n1", "--interval", "0"]);
    assert!(!ok);
    assert!(stderr.contains("--interval must be 1-3600"), "{stderr}");
}
