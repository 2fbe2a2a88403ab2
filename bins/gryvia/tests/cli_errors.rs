//! Every command that talks to a cluster, run with no cluster, a missing kubeconfig and a
//! malformed one: one readable line on standard error (each cause said once) and a non-zero
//! exit. And the commands that need no cluster: `validate`, `completion`, `version --client`,
//! and clap's own errors. No control plane is needed (none is used).

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every command that connects, with the arguments it needs to get that far.
const COMMANDS: &[&[&str]] = &[
    &["health"],
    &["health", "storage"],
    &["health", "network"],
    &["get", "node", "n1"],
    &["maintenance", "start", "n1", "--reason", "r"],
    &["maintenance", "end", "n1"],
    &["submit", "--template", "t"],
    &["status", "j"],
    &["logs", "j"],
    &["queue"],
    &["queue", "-A"],
    &["capacity"],
    &["cost", "t"],
    &["invoice", "list"],
    &["tune", "status", "s"],
    &["model", "list"],
    &["model", "history", "r"],
    &["model", "promote", "r", "v1", "--stage", "production"],
    &["serve", "status", "s"],
    &["workspace", "list"],
    &["workspace", "start", "w"],
    &["workspace", "stop", "w"],
    &["workspace", "open", "w"],
    &["network", "graph"],
    &["gpu", "training"],
    &["gpu", "nccl", "--job", "x"],
    &["tenant", "create", "t"],
    &["tenant", "list"],
    &["tenant", "get", "t"],
    &["quota", "t"],
    &["install", "--timeout", "1"],
    &["version"],
];

struct Run {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn gryvia(args: &[&str], kubeconfig: &Path) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_gryvia"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    Run {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gryvia-cli-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `run` failed with exactly one line on standard error that contains `want`, says `error:`
/// once and repeats no cause.
fn one_line_failure(args: &[&str], run: &Run, want: &str) {
    let what = format!("gryvia {}", args.join(" "));
    assert!(!run.ok, "{what} succeeded: {}", run.stdout);
    assert_eq!(run.code, Some(1), "{what}: {}", run.stderr);
    assert!(run.stderr.ends_with('\n'), "{what}: {:?}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: {:?}", run.stderr);
    let line = lines[0];
    assert!(line.starts_with("error: "), "{what}: {line}");
    assert!(line.contains(want), "{what}: {line} (wanted {want})");
    assert_eq!(
        line.matches(want).count(),
        1,
        "{what} repeats itself: {line}"
    );
    assert!(line.len() < 400, "{what}: {line}");
    // Only `version` prints something before it needs the cluster: its client line.
    let expected_stdout = if args == ["version"] {
        format!("client: gryvia {}\n", env!("CARGO_PKG_VERSION"))
    } else {
        String::new()
    };
    assert_eq!(run.stdout, expected_stdout, "{what}");
}

#[test]
fn a_missing_kubeconfig_is_one_line_naming_the_file_and_what_to_do() {
    let missing = dir().join("nonexistent");
    let want = format!(
        "no Kubernetes configuration: {}: no such file; set KUBECONFIG or run in a cluster",
        missing.display()
    );
    for args in COMMANDS {
        one_line_failure(args, &gryvia(args, &missing), &want);
    }
}

#[test]
fn a_malformed_kubeconfig_is_one_line_naming_the_file_and_the_place() {
    let bad = dir().join("malformed");
    std::fs::write(&bad, "apiVersion: v1\nclusters: [\n").unwrap();
    let want = format!("malformed kubeconfig {}: line ", bad.display());
    for args in COMMANDS {
        one_line_failure(args, &gryvia(args, &bad), &want);
    }
}

#[test]
fn with_no_cluster_listening_every_command_fails_in_one_line() {
    let kc = dir().join("nocluster");
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
         clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]\n",
    )
    .unwrap();
    for args in COMMANDS {
        one_line_failure(args, &gryvia(args, &kc), "Connection refused");
    }
}

#[test]
fn a_context_that_does_not_exist_is_one_line() {
    let kc = dir().join("nocontext");
    std::fs::write(&kc, "apiVersion: v1\nkind: Config\ncurrent-context: gone\n").unwrap();
    let args = ["tenant", "list"];
    let want = format!(
        "kubeconfig {}: failed to load current context: gone",
        kc.display()
    );
    one_line_failure(&args, &gryvia(&args, &kc), &want);
}

#[test]
fn clap_errors_are_one_line_ending_in_a_newline_with_exit_2() {
    let missing = dir().join("nonexistent");
    for args in [
        &["status"][..],
        &["--bogus"],
        &["health", "disks"],
        &["completion", "tcsh"],
        &["queue", "--what-if"],
    ] {
        let run = gryvia(args, &missing);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.ends_with(" (see --help)\n"),
            "{args:?}: {:?}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn completion_scripts_name_the_subcommands_for_each_shell() {
    let missing = dir().join("nonexistent");
    for (shell, marker) in [
        ("bash", "complete -F _gryvia"),
        ("zsh", "#compdef gryvia"),
        ("fish", "complete -c gryvia"),
    ] {
        let run = gryvia(&["completion", shell], &missing);
        assert!(run.ok, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains(marker), "{shell}: no {marker}");
        for sub in ["workspace", "maintenance", "completion", "version"] {
            assert!(run.stdout.contains(sub), "{shell}: no {sub}");
        }
    }
    // bash parses what it is given.
    let script = dir().join("gryvia.bash");
    std::fs::write(&script, gryvia(&["completion", "bash"], &missing).stdout).unwrap();
    let out = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn version_client_needs_no_cluster() {
    let run = gryvia(&["version", "--client"], &dir().join("nonexistent"));
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!("client: gryvia {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn validate_checks_files_offline_and_names_the_field_of_a_bad_object() {
    let dir = dir();
    let good = dir.join("good.yaml");
    std::fs::write(
        &good,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaTenant\nmetadata: {name: team-a}\nspec: {displayName: Team A}\n---\n\
         apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata: {name: j, namespace: default}\n\
         spec: {image: 'busybox', gpus: 1}\n",
    )
    .unwrap();
    let missing = dir.join("nonexistent");
    let run = gryvia(&["validate", "-f", good.to_str().unwrap()], &missing);
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.stdout, "2 object(s) valid\n");

    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata: {name: j}\nspec: {image: busybox, gpus: -3}\n",
    )
    .unwrap();
    let run = gryvia(&["validate", "-f", bad.to_str().unwrap()], &missing);
    one_line_failure(&["validate"], &run, "spec.gpus");

    let run = gryvia(
        &["validate", "-f", dir.join("absent.yaml").to_str().unwrap()],
        &missing,
    );
    one_line_failure(&["validate"], &run, "absent.yaml");
}
