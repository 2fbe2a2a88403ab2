//! `gryvia workspace list|start|stop|open`: GPU notebooks and code-server workspaces.

use anyhow::Context;
use clap::Subcommand;
use gryvia_reconcile::workspace;
use gryvia_types::GryviaWorkspace;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::output::{Output, Table, print_objects};

/// `gryvia workspace ...`.
#[derive(Subcommand, Debug)]
pub enum WorkspaceCommand {
    /// The workspaces of a namespace: type, owner, GPUs, phase, last activity.
    List {
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Start a stopped or culled workspace (its storage is as it was left).
    Start {
        /// GryviaWorkspace name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Stop a workspace: its pod is deleted, its storage kept.
    Stop {
        /// GryviaWorkspace name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// How to reach a workspace from this machine: the port-forward command and the URL.
    Open {
        /// GryviaWorkspace name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Local port (default: the server's).
        #[arg(long)]
        port: Option<u16>,
    },
}

/// The workspaces as a table.
pub fn render_list(list: &[GryviaWorkspace]) -> String {
    let mut table = Table::new(&[
        "NAME",
        "TYPE",
        "OWNER",
        "GPUS",
        "PHASE",
        "LAST ACTIVITY",
        "IDLE TIMEOUT",
    ]);
    for w in list {
        let st = w.status.clone().unwrap_or_default();
        table.row(vec![
            w.metadata.name.clone().unwrap_or_default(),
            format!("{:?}", w.spec.type_).to_lowercase(),
            w.spec.owner.clone(),
            w.spec.gpus.to_string(),
            st.phase.unwrap_or_else(|| "-".to_owned()),
            st.last_activity.map_or("-".to_owned(), |t| t.0.to_string()),
            w.spec
                .idle_timeout_minutes
                .map_or("-".to_owned(), |m| format!("{m}m")),
        ]);
    }
    table.render()
}

/// The lines `open` prints for `w` in `ns` (`token`: the Jupyter token when readable).
pub fn open_lines(w: &GryviaWorkspace, ns: &str, local: u16, token: Option<&str>) -> String {
    let name = w.metadata.name.clone().unwrap_or_default();
    let remote = workspace::port(w.spec.type_);
    let mut out = format!("kubectl port-forward -n {ns} pod/{name} {local}:{remote}\n");
    match (w.spec.type_, token) {
        (gryvia_types::WorkspaceType::Jupyter, Some(t)) => {
            out.push_str(&format!("then open http://127.0.0.1:{local}/lab?token={t}\n"));
        }
        (gryvia_types::WorkspaceType::Vscode, Some(_)) => {
            out.push_str(&format!(
                "then open http://127.0.0.1:{local}/ (the password is key {} of Secret {ns}/{})\n",
                workspace::TOKEN_KEY,
                workspace::token_secret(&name)
            ));
        }
        (_, None) => out.push_str(&format!(
            "then open http://127.0.0.1:{local}/ (the token is key {} of Secret {ns}/{}, not readable with your rights)\n",
            workspace::TOKEN_KEY,
            workspace::token_secret(&name)
        )),
    }
    if w.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running") {
        out.push_str(&format!(
            "(not running now: gryvia workspace start {name} -n {ns})\n"
        ));
    }
    out
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached, the workspace does not exist or
/// the change is refused.
pub async fn run(cmd: WorkspaceCommand) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let ns_of = |n: Option<String>| n.unwrap_or_else(|| client.default_namespace().to_owned());
    match cmd {
        WorkspaceCommand::List { namespace, output } => {
            let ns = ns_of(namespace);
            let api: Api<GryviaWorkspace> = Api::namespaced(client.clone(), &ns);
            let mut list = api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list GryviaWorkspaces in {ns}"))?
                .items;
            list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            if output != Output::Table {
                return print_objects(&list, output);
            }
            crate::print_out(&render_list(&list))
        }
        WorkspaceCommand::Start { name, namespace } => {
            let ns = ns_of(namespace);
            let patch = json!({"metadata": {"annotations": {workspace::CULLED_ANNOTATION: null}}, "spec": {"stopped": false}});
            patch_workspace(&client, &ns, &name, &patch).await?;
            crate::print_out(&format!("{name}: starting\n"))
        }
        WorkspaceCommand::Stop { name, namespace } => {
            let ns = ns_of(namespace);
            patch_workspace(&client, &ns, &name, &json!({"spec": {"stopped": true}})).await?;
            crate::print_out(&format!("{name}: stopping (storage kept)\n"))
        }
        WorkspaceCommand::Open {
            name,
            namespace,
            port,
        } => {
            let ns = ns_of(namespace);
            let api: Api<GryviaWorkspace> = Api::namespaced(client.clone(), &ns);
            let w = crate::get_named(&api, &ns, &name).await?;
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let token = secrets
                .get_opt(&workspace::token_secret(&name))
                .await
                .ok()
                .flatten()
                .and_then(|s| {
                    s.data?
                        .get(workspace::TOKEN_KEY)
                        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                });
            let local = port
                .unwrap_or_else(|| u16::try_from(workspace::port(w.spec.type_)).unwrap_or(8888));
            crate::print_out(&open_lines(&w, &ns, local, token.as_deref()))
        }
    }
}

async fn patch_workspace(
    client: &kube::Client,
    ns: &str,
    name: &str,
    patch: &serde_json::Value,
) -> anyhow::Result<()> {
    let api: Api<GryviaWorkspace> = Api::namespaced(client.clone(), ns);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            anyhow::bail!("GryviaWorkspace {ns}/{name} not found")
        }
        Err(e) => Err(e).with_context(|| format!("update GryviaWorkspace {ns}/{name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(t: &str, phase: &str) -> GryviaWorkspace {
        serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaWorkspace",
            "metadata": {"name": "nb", "namespace": "ml"},
            "spec": {"type": t, "owner": "alice", "gpus": 1, "idleTimeoutMinutes": 30},
            "status": {"phase": phase, "lastActivity": "2026-12-05T08:00:00Z"}
        }))
        .unwrap()
    }

    #[test]
    fn open_prints_the_port_forward_and_the_url() {
        let out = open_lines(&ws("jupyter", "Running"), "ml", 8888, Some("abc"));
        assert_eq!(
            out,
            "kubectl port-forward -n ml pod/nb 8888:8888\nthen open http://127.0.0.1:8888/lab?token=abc\n"
        );
        let out = open_lines(&ws("vscode", "Stopped"), "ml", 9000, Some("abc"));
        assert!(
            out.starts_with("kubectl port-forward -n ml pod/nb 9000:8080\n"),
            "{out}"
        );
        assert!(
            !out.contains("abc") && out.contains("Secret ml/nb-token"),
            "{out}"
        );
        assert!(out.contains("gryvia workspace start nb -n ml"), "{out}");
    }

    #[test]
    fn list_shows_phase_and_last_activity() {
        let out = render_list(&[ws("jupyter", "Running")]);
        let row = out.lines().nth(1).unwrap();
        assert!(
            row.contains("jupyter")
                && row.contains("Running")
                && row.contains("2026-12-05T08:00:00Z")
                && row.contains("30m"),
            "{out}"
        );
    }
}
