//! `gryvia apikey create|list|revoke`: API keys of the gateway, made by an operator with access
//! to the gateway's namespace (a user makes their own through the gateway: `POST
//! /api/v1/apikeys`). A key is shown once and stored only as an argon2id hash.

use clap::Subcommand;
use gryvia_client::gateway::apikeys::{self, NewKey};
use gryvia_reconcile::gateway::Scope;

use crate::output::{Output, Table, print_objects};

/// `gryvia apikey ...`.
#[derive(Subcommand, Debug)]
pub enum ApiKeyCommand {
    /// Create a key acting as a user (and groups); prints the key once.
    Create {
        /// A name for people.
        #[arg(long)]
        name: String,
        /// The user the key acts as (as RBAC knows it, e.g. an e-mail).
        #[arg(long)]
        user: String,
        /// A group the key acts with (repeatable).
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Limit the key to this tenant's namespace.
        #[arg(long)]
        tenant: Option<String>,
        /// Read-only keys may only GET.
        #[arg(long, value_enum, default_value = "write")]
        scope: ScopeArg,
        /// Days until the key expires.
        #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=365))]
        expires_in_days: u32,
        /// The gateway's namespace (where keys are kept).
        #[arg(long, default_value = "gryvia-system")]
        namespace: String,
    },
    /// List keys (never their secrets).
    List {
        /// Only the keys of this user.
        #[arg(long)]
        user: Option<String>,
        /// The gateway's namespace.
        #[arg(long, default_value = "gryvia-system")]
        namespace: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Revoke a key by its id.
    Revoke {
        /// The key's id (the part after `gryvia_`, before the next `_`).
        id: String,
        /// The gateway's namespace.
        #[arg(long, default_value = "gryvia-system")]
        namespace: String,
    },
}

/// A key's scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    /// GET only.
    Read,
    /// Reads and changes.
    Write,
}

/// Runs an `apikey` command.
///
/// # Errors
/// A one-line error when the API server refuses or the key does not exist.
pub async fn run(cmd: ApiKeyCommand) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    match cmd {
        ApiKeyCommand::Create {
            name,
            user,
            groups,
            tenant,
            scope,
            expires_in_days,
            namespace,
        } => {
            let now = jiff::Timestamp::now();
            let new = NewKey {
                name,
                user,
                groups,
                tenant,
                scope: match scope {
                    ScopeArg::Read => Scope::Read,
                    ScopeArg::Write => Scope::Write,
                },
                expires: Some(
                    now + jiff::SignedDuration::from_hours(24 * i64::from(expires_in_days)),
                ),
            };
            let (record, key) = apikeys::create(&client, &namespace, &new, now).await?;
            crate::print_out(&format!(
                "{key}\nAPI key {} for {} ({}), expires {}: shown once, store it now\n",
                record.id,
                record.user,
                record.scope.as_str(),
                record
                    .expires
                    .map_or_else(|| "never".to_owned(), |t| t.to_string())
            ))
        }
        ApiKeyCommand::List {
            user,
            namespace,
            output,
        } => {
            let keys = apikeys::list(&client, &namespace, user.as_deref()).await?;
            if output != Output::Table {
                return print_objects(&keys, output);
            }
            if keys.is_empty() {
                return crate::print_out("no API keys\n");
            }
            let mut t = Table::new(&[
                "ID", "NAME", "USER", "TENANT", "SCOPE", "CREATED", "EXPIRES",
            ]);
            for k in keys {
                t.row(vec![
                    k.id,
                    k.name,
                    k.user,
                    k.tenant.unwrap_or_else(|| "-".to_owned()),
                    k.scope.as_str().to_owned(),
                    k.created.to_string(),
                    k.expires
                        .map_or_else(|| "never".to_owned(), |e| e.to_string()),
                ]);
            }
            t.print();
            Ok(())
        }
        ApiKeyCommand::Revoke { id, namespace } => {
            if apikeys::revoke(&client, &namespace, &id).await? {
                crate::print_out(&format!("API key {id} revoked\n"))
            } else {
                anyhow::bail!("no API key {id} in namespace {namespace}")
            }
        }
    }
}
