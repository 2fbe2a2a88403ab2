//! Real receivers for outbound deliveries, as child processes: a Standard Webhooks verifier and
//! an SMTP server (both Python, from `tests/receivers/`, their packages installed by
//! `scripts/setup`).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers panic on failure, in every test file that includes them"
)]

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// Starts `python3 tests/receivers/SCRIPT ARGS...` and reads the first line it prints.
fn spawn(script: &str, args: &[&std::ffi::OsStr], what: &str) -> (Child, String) {
    let path = format!("{}/tests/receivers/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("python3")
        .arg(&path)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 runs the {what}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("the {what} prints its first line: {e}"));
    (child, line)
}

/// A log file of this test process for `name`, empty.
fn log_file(name: &str) -> PathBuf {
    let log = std::env::temp_dir().join(format!("gryvia-{name}-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&log);
    log
}

/// The JSON lines of `log`.
fn lines(log: &PathBuf) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The Python receiver of `tests/receivers/standard_webhooks.py`, which verifies every delivery
/// with PyPI `standardwebhooks` (installed by `scripts/setup`).
pub struct StandardReceiver {
    /// Where it listens.
    pub url: String,
    log: PathBuf,
    child: Child,
}

impl StandardReceiver {
    /// Starts it with `secret` (what it verifies signatures with).
    pub fn start(secret: &str) -> StandardReceiver {
        let log = log_file("standard-webhooks");
        let (child, line) = spawn(
            "standard_webhooks.py",
            &[secret.as_ref(), log.as_os_str()],
            "Standard Webhooks receiver",
        );
        let port: u16 = line.trim().parse().unwrap_or_else(|_| {
            panic!("the receiver did not start (is PyPI standardwebhooks installed? scripts/setup): {line:?}")
        });
        StandardReceiver {
            url: format!("http://127.0.0.1:{port}"),
            log,
            child,
        }
    }

    /// Every request it got.
    pub fn got(&self) -> Vec<StandardGot> {
        use base64::Engine as _;
        lines(&self.log)
            .into_iter()
            .map(|v| StandardGot {
                id: v["id"].as_str().unwrap().to_owned(),
                answer: u16::try_from(v["answer"].as_u64().unwrap()).unwrap(),
                headers: serde_json::from_value(v["headers"].clone()).unwrap(),
                body: base64::engine::general_purpose::STANDARD
                    .decode(v["body"].as_str().unwrap())
                    .unwrap(),
            })
            .collect()
    }
}

/// One request the Standard Webhooks receiver got: its `webhook-id`, its answer (200
/// verified, 409 replayed, 400 refused), its headers (lower-case) and body.
#[derive(Clone, Debug)]
pub struct StandardGot {
    /// `webhook-id`.
    pub id: String,
    /// 200 verified, 409 replayed, 400 refused.
    pub answer: u16,
    /// Headers, lower-case.
    pub headers: BTreeMap<String, String>,
    /// Body.
    pub body: Vec<u8>,
}

impl Drop for StandardReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The SMTP server of `tests/receivers/smtp.py` (PyPI `aiosmtpd`), which logs every message it
/// accepts. It can be started on a port chosen before (to show deliveries that waited for it).
pub struct SmtpReceiver {
    log: PathBuf,
    child: Child,
}

/// One message the SMTP receiver accepted.
#[derive(Clone, Debug)]
pub struct Mail {
    /// Envelope sender.
    pub from: String,
    /// Envelope recipients.
    pub to: Vec<String>,
    /// `Message-ID`.
    pub message_id: String,
    /// `Subject`.
    pub subject: String,
    /// The text.
    pub text: String,
}

impl SmtpReceiver {
    /// Starts it on 127.0.0.1:`port`.
    pub fn start(port: u16) -> SmtpReceiver {
        let log = log_file(&format!("smtp-{port}"));
        let (child, line) = spawn(
            "smtp.py",
            &[port.to_string().as_ref(), log.as_os_str()],
            "SMTP receiver",
        );
        assert_eq!(
            line.trim(),
            "ready",
            "the SMTP receiver did not start (is PyPI aiosmtpd installed? scripts/setup)"
        );
        SmtpReceiver { log, child }
    }

    /// Every message it accepted.
    pub fn got(&self) -> Vec<Mail> {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        lines(&self.log)
            .iter()
            .map(|v| Mail {
                from: text(&v["from"]),
                to: serde_json::from_value(v["to"].clone()).unwrap(),
                message_id: text(&v["message_id"]),
                subject: text(&v["subject"]),
                text: text(&v["text"]),
            })
            .collect()
    }
}

impl Drop for SmtpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
