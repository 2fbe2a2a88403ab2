//! The API gateway: REST over what the CLI does, for people and programs without kubectl.
//!
//! - **Authentication**: OIDC ID tokens verified against the issuer's keys ([`oidc`]), or API
//!   keys stored as argon2id hashes ([`apikeys`]), both as `Authorization: Bearer`.
//! - **Authorization through Kubernetes**: every request acts on the cluster by impersonating
//!   the caller's user and groups ([`impersonate`]), so RBAC is the one judge. The gateway's own
//!   identity only reads what RBAC cannot scope per tenant (cluster-scoped tenants, budgets,
//!   usage records, invoices), and only after the API server has confirmed, as the caller, that
//!   the caller may list jobs in the tenant's namespace.
//! - **Limits and audit**: a token bucket per identity; one audit line per mutating request.
//! - **OpenAPI 3.1** at `/openapi.json` ([`openapi`]), generated from the route table and the
//!   same schemas as the CRDs; the **dashboard** at `/` ([`dashboard`]).

pub mod api;
pub mod apikeys;
pub mod dashboard;
pub mod impersonate;
pub mod oidc;
pub mod openapi;
mod routes;
mod server;

pub use server::{Config, Gateway, router, run};
