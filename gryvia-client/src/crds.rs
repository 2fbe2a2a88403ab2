//! Installation of the Gryvia CRDs.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tracing::{info, instrument};

use crate::{Error, Result};

/// Field manager of CRD installation.
pub const FIELD_MANAGER: &str = "gryvia-install";

/// Applies every Gryvia CRD with server-side apply and waits until all are Established.
/// (Right after a CRD changes the API server may answer reads of its objects with 429
/// "storage is (re)initializing" for a moment; clients of [`crate::connect`] retry reads.)
///
/// # Errors
/// [`Error::Api`] when an apply or read fails, [`Error::Timeout`] when a CRD is not
/// Established within `timeout`.
///
/// # Guarantees
/// Idempotent: applying twice changes nothing the second time. Returns the CRD names.
#[instrument(skip(client))]
pub async fn install(client: &kube::Client, timeout: Duration) -> Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for crd in gryvia_types::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| Error::Api {
                operation: format!("apply CRD {name}"),
                source,
            })?;
        names.push(name);
    }
    let deadline = tokio::time::Instant::now() + timeout;
    for name in &names {
        wait_established(&api, name, deadline, timeout).await?;
    }
    info!(count = names.len(), "CRDs established");
    Ok(names)
}

async fn wait_established(
    api: &Api<CustomResourceDefinition>,
    name: &str,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<()> {
    loop {
        let crd = api.get(name).await.map_err(|source| Error::Api {
            operation: format!("read CRD {name}"),
            source,
        })?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("CRD {name} to be Established"),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
