//! What the CLI, the gateway and the Python SDK call: one-shot operations on the cluster
//! (submit and wait for jobs, tenants, maintenance, drains, reports). Writes that controllers
//! also make go through the same executor (`crate::apply`), so a drain evicts exactly as the
//! GPU health controller does.

pub mod jobs;
pub mod nodes;
pub mod tenants;

/// Field manager of the objects the CLI (and the SDK's one-shot operations) write.
pub const CLI_MANAGER: &str = "gryvia-cli";
