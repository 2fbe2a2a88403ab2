//! Dex, the real OIDC issuer of the gateway's tests (`testenv/up --with-dex`): where it is, and
//! ID tokens from it by the password grant.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The Dex of the running test environment.
#[derive(Clone, Debug)]
pub struct Dex {
    /// The issuer URL (`iss` of its tokens).
    pub issuer: String,
    /// The CA that signed its serving certificate.
    pub ca: PathBuf,
}

/// Every static user's password (testenv/README.md, "Dex").
pub const PASSWORD: &str = "password";

fn state_dir() -> PathBuf {
    if let Ok(p) = std::env::var("GRYVIA_TESTENV_KUBECONFIG")
        && let Some(dir) = std::path::Path::new(&p).parent()
    {
        return dir.to_path_buf();
    }
    PathBuf::from(
        std::env::var("GRYVIA_TESTENV_DIR").unwrap_or_else(|_| "/tmp/gryvia-testenv".into()),
    )
}

/// The running Dex, or `None` (a skipped test) when there is none and e2e tests are not
/// required.
///
/// # Panics
/// When `GRYVIA_E2E=1` and Dex is not running (start the environment with `--with-dex`).
pub fn dex() -> Option<Dex> {
    let dir = state_dir();
    let found = std::fs::read_to_string(dir.join("dex/config.yaml"))
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("issuer: "))
                .map(|i| i.trim().to_owned())
        })
        .map(|issuer| Dex {
            issuer,
            ca: dir.join("pki/ca.crt"),
        })
        .filter(|d| {
            d.get(&format!("{}/.well-known/openid-configuration", d.issuer))
                .is_ok()
        });
    if found.is_none() {
        assert!(
            !crate::required(),
            "GRYVIA_E2E=1 but Dex is not running in {}: start the test environment with testenv/up --with-dex",
            dir.display()
        );
        eprintln!("skipping: no Dex (testenv/up --with-dex)");
    }
    found
}

impl Dex {
    fn curl(&self, args: &[&str]) -> Result<serde_json::Value> {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&self.ca)
            .args(args)
            .output()
            .context("run curl")?;
        if !out.status.success() {
            bail!(
                "curl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "curl {args:?}: not JSON: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// A JSON document of Dex.
    ///
    /// # Errors
    /// When it cannot be fetched.
    pub fn get(&self, url: &str) -> Result<serde_json::Value> {
        self.curl(&[url])
    }

    /// An ID token of `user` (e.g. `alice@example.com`) for client `client` by the password
    /// grant.
    ///
    /// # Errors
    /// When Dex refuses.
    pub fn token(&self, client: &str, secret: &str, user: &str) -> Result<String> {
        let answer = self.curl(&[
            "-u",
            &format!("{client}:{secret}"),
            "-d",
            "grant_type=password",
            "-d",
            &format!("username={user}"),
            "-d",
            &format!("password={PASSWORD}"),
            "-d",
            "scope=openid email groups profile",
            &format!("{}/token", self.issuer),
        ])?;
        let token = answer["id_token"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("Dex gave no id_token for {user}: {answer}"))?;
        crate::record_secret(&format!("Dex client secret of {client}"), secret);
        if let Some(signature) = token.rsplit('.').next() {
            crate::record_secret(&format!("the signature of {user}'s token"), signature);
        }
        Ok(token)
    }

    /// An ID token of `user` for the `gryvia` client (the gateway's audience).
    ///
    /// # Errors
    /// When Dex refuses.
    pub fn gryvia_token(&self, user: &str) -> Result<String> {
        self.token("gryvia", "gryvia-testenv-secret", user)
    }
}
