//! Gryvia's custom resources and the vocabulary around them.
//!
//! This crate is the data model of Gryvia: every custom resource of the group `gryvia.io`,
//! version `v1alpha1` (as `kube::CustomResource` types with schemars schemas that carry their
//! validation), the labels, annotations and taints Gryvia puts on Kubernetes objects, helpers
//! for Kubernetes-style conditions, decimal money amounts, and generation of the CRD YAML that
//! `deploy/crds/` holds.
//!
//! What it is not: it does no IO, has no async runtime and no Kubernetes client. Policy lives
//! in `gryvia-reconcile`, talking to the API server in `gryvia-client`.
//!
//! With the `validation` feature, [`validation`] checks an object against the generated schema
//! (OpenAPI structure, ranges, enums, required fields and the CEL rules) on the client side,
//! with errors that name the field path.

#![expect(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) lists legitimately repeat `type_ = ...`"
)]

pub mod ai;
pub mod billing;
pub mod conditions;
pub mod crds;
pub mod health;
pub mod kueue;
pub mod labels;
pub mod ml;
pub mod money;
pub mod network;
pub mod pods;
pub mod reference;
pub mod scheduling;
pub mod tenancy;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "validation")]
pub mod validation;

pub use k8s_openapi;
pub use kube::core;

pub use ai::*;
pub use billing::*;
pub use health::*;
pub use ml::*;
pub use network::*;
pub use pods::CachedPod;
pub use scheduling::*;
pub use tenancy::*;

/// The API group of every Gryvia custom resource.
pub const GROUP: &str = "gryvia.io";
/// The API version of every Gryvia custom resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Gryvia custom resource.
pub const API_VERSION: &str = "gryvia.io/v1alpha1";
/// The category every Gryvia CRD belongs to, so `kubectl get gryvia` lists them all.
pub const CATEGORY: &str = "gryvia";

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A YAML document could not be parsed or serialized.
    #[error("yaml: {0}")]
    Yaml(String),
    /// A JSON value could not be converted.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A decimal amount was malformed.
    #[error("invalid decimal amount {value:?}: {reason}")]
    Decimal {
        /// The text that failed to parse.
        value: String,
        /// Why it failed.
        reason: &'static str,
    },
    /// An object does not fit its type.
    #[error("{path}: {reason}")]
    Decode {
        /// Where: `spec.gpus`, `items[3].spec.gpus`.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The kind is not a Gryvia kind.
    #[error("unknown kind {0:?}: not a gryvia.io/v1alpha1 kind")]
    UnknownKind(String),
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
