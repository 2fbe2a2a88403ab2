//! `gryvia-gateway`: the API gateway. REST over what the CLI does (jobs, queues with
//! why-pending, GPU nodes and maintenance, tenants, usage, budgets, costs, invoices, the ML
//! kinds), an OpenAPI 3.1 document at `/openapi.json`, and the dashboard at `/`. Callers log in
//! with OIDC ID tokens of the configured issuer or with API keys; every request acts on the
//! cluster as the caller through Kubernetes impersonation, so RBAC decides what it may do.
//!
//! A thin binary: its flags (and the environment variables the features guide names); the
//! gateway is `gryvia_client::gateway`, its policy `gryvia_reconcile::gateway`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use gryvia_client::gateway::Config;
use gryvia_client::gateway::oidc::OidcConfig;
use gryvia_client::operators::{exit_code, init_logging};
use gryvia_reconcile::gateway::ClaimMapping;

/// The API gateway of the Gryvia GPU platform.
#[derive(Parser, Debug)]
#[command(name = "gryvia-gateway", version, about, long_about = None)]
struct Flags {
    /// Where to listen (REST, /openapi.json, the dashboard, /metrics, /healthz, /readyz).
    #[arg(long, env = "GRYVIA_GATEWAY_LISTEN", default_value = "0.0.0.0:8000")]
    listen: SocketAddr,
    /// Accept OIDC ID tokens (and offer single sign-on in the dashboard).
    #[arg(long, env = "OIDC_ENABLED")]
    oidc_enabled: bool,
    /// The issuer URL; tokens must carry exactly this `iss`.
    #[arg(long, env = "OIDC_ISSUER_URL")]
    oidc_issuer_url: Option<String>,
    /// The client id the dashboard logs in with.
    #[arg(long, env = "OIDC_CLIENT_ID")]
    oidc_client_id: Option<String>,
    /// Accepted token audiences, comma-separated (default: the client id).
    #[arg(long, env = "OIDC_AUDIENCE", value_delimiter = ',')]
    oidc_audience: Vec<String>,
    /// A PEM bundle to trust for the issuer besides the system's roots.
    #[arg(long, env = "OIDC_CA_FILE")]
    oidc_ca_file: Option<PathBuf>,
    /// The claim that names the user.
    #[arg(long, env = "OIDC_USERNAME_CLAIM", default_value = "email")]
    oidc_username_claim: String,
    /// The claim that lists the user's groups.
    #[arg(long, env = "OIDC_GROUPS_CLAIM", default_value = "groups")]
    oidc_groups_claim: String,
    /// Groups whose members are platform admins, comma-separated.
    #[arg(long, env = "GRYVIA_OIDC_ADMIN_GROUPS", value_delimiter = ',')]
    oidc_admin_groups: Vec<String>,
    /// Namespace of the API key Secrets (the gateway's own).
    #[arg(long, env = "POD_NAMESPACE", default_value = "gryvia-system")]
    keys_namespace: String,
    /// Sustained requests per second allowed per identity.
    #[arg(long, default_value_t = 50.0)]
    rate_limit: f64,
    /// Requests per identity allowed in a burst.
    #[arg(long, default_value_t = 100)]
    rate_burst: u32,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

impl Flags {
    fn config(&self) -> Result<Config, String> {
        let oidc = if self.oidc_enabled {
            let issuer = self
                .oidc_issuer_url
                .clone()
                .filter(|i| !i.is_empty())
                .ok_or("OIDC_ENABLED needs OIDC_ISSUER_URL (--oidc-issuer-url)")?;
            let client = self
                .oidc_client_id
                .clone()
                .filter(|c| !c.is_empty())
                .ok_or("OIDC_ENABLED needs OIDC_CLIENT_ID (--oidc-client-id)")?;
            let mut audiences: Vec<String> = self
                .oidc_audience
                .iter()
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect();
            if audiences.is_empty() {
                audiences.push(client);
            }
            Some(OidcConfig {
                issuer,
                audiences,
                ca_file: self.oidc_ca_file.clone(),
            })
        } else {
            None
        };
        if self.rate_limit.is_nan() || self.rate_limit <= 0.0 {
            return Err(format!(
                "--rate-limit must be above 0, not {}",
                self.rate_limit
            ));
        }
        Ok(Config {
            listen: self.listen,
            oidc,
            client_id: self.oidc_client_id.clone(),
            mapping: ClaimMapping {
                username_claim: self.oidc_username_claim.clone(),
                groups_claim: self.oidc_groups_claim.clone(),
                admin_groups: self
                    .oidc_admin_groups
                    .iter()
                    .map(|g| g.trim().to_owned())
                    .filter(|g| !g.is_empty())
                    .collect(),
            },
            keys_namespace: self.keys_namespace.clone(),
            rate_per_second: self.rate_limit,
            rate_burst: self.rate_burst,
        })
    }
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.log_format);
    let config = match flags.config() {
        Ok(c) => c,
        Err(e) => return exit_code(Err(e)),
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return exit_code(Err(format!("start the async runtime: {e}"))),
    };
    exit_code(rt.block_on(async {
        let client = gryvia_client::connect().await?;
        gryvia_client::gateway::run(client, config).await
    }))
}
