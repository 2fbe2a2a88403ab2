//! `gryvia network graph`: who talks to whom, from a namespace's GryviaServiceGraphs.

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use gryvia_types::GryviaServiceGraph;
use kube::api::{Api, ListParams};

use crate::output::Table;

/// How `network graph` prints.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphOutput {
    /// One row per edge.
    Table,
    /// The graphs' status as JSON.
    Json,
    /// Graphviz DOT (`| dot -Tsvg`).
    Dot,
}

/// `gryvia network ...`.
#[derive(Subcommand, Debug)]
pub enum NetworkCommand {
    /// Show the service graph: edges between workloads with bytes, connections and
    /// retransmissions over each graph's window.
    Graph {
        /// Namespace of the GryviaServiceGraphs (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Only this GryviaServiceGraph.
        #[arg(long)]
        name: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = GraphOutput::Table)]
        output: GraphOutput,
    },
}

/// The graphs' edges as a table.
pub fn render(graphs: &[GryviaServiceGraph]) -> String {
    let mut table = Table::new(&[
        "GRAPH",
        "FROM",
        "TO",
        "PORT",
        "BYTES",
        "CONNECTIONS",
        "RETRANSMITS",
    ]);
    for g in graphs {
        let name = g.metadata.name.clone().unwrap_or_default();
        for e in g.status.iter().flat_map(|s| &s.edges) {
            table.row(vec![
                name.clone(),
                e.from.clone(),
                e.to.clone(),
                e.port.to_string(),
                e.bytes.to_string(),
                e.connections.to_string(),
                e.retransmits.to_string(),
            ]);
        }
    }
    table.render()
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached, the graph does not exist, or the
/// namespace has none.
pub async fn run(cmd: NetworkCommand) -> anyhow::Result<()> {
    let NetworkCommand::Graph {
        namespace,
        name,
        output,
    } = cmd;
    let client = gryvia_client::connect().await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let api: Api<GryviaServiceGraph> = Api::namespaced(client, &ns);
    let graphs = match &name {
        Some(n) => vec![crate::get_named(&api, &ns, n).await?],
        None => {
            let mut all = api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list GryviaServiceGraphs in {ns}"))?
                .items;
            all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            all
        }
    };
    if graphs.is_empty() {
        anyhow::bail!(
            "no GryviaServiceGraph in namespace {ns}: create one (spec.namespaces, spec.windowMinutes) for the network-operator to fill"
        );
    }
    match output {
        GraphOutput::Table => crate::print_out(&render(&graphs)),
        GraphOutput::Json => {
            let statuses: Vec<serde_json::Value> = graphs
                .iter()
                .map(|g| {
                    serde_json::json!({
                        "name": g.metadata.name,
                        "namespace": g.metadata.namespace,
                        "windowMinutes": g.spec.window_minutes,
                        "nodes": g.status.as_ref().map(|s| s.nodes.clone()).unwrap_or_default(),
                        "edges": g.status.as_ref().map(|s| s.edges.clone()).unwrap_or_default(),
                        "edgesLeftOut": g.status.as_ref().map_or(0, |s| s.edges_left_out),
                        "bytesLeftOut": g.status.as_ref().map_or(0, |s| s.bytes_left_out),
                        "updatedAt": g.status.as_ref().and_then(|s| s.updated_at.clone()),
                    })
                })
                .collect();
            let value = if statuses.len() == 1 {
                statuses.into_iter().next().unwrap_or_default()
            } else {
                serde_json::Value::Array(statuses)
            };
            crate::print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?))
        }
        GraphOutput::Dot => {
            let mut out = String::new();
            for g in &graphs {
                out.push_str(&gryvia_reconcile::network::graph::dot(
                    &g.status.clone().unwrap_or_default(),
                ));
            }
            crate::print_out(&out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_edge() {
        let g: GryviaServiceGraph = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaServiceGraph",
            "metadata": {"name": "ml", "namespace": "ml"},
            "spec": {"windowMinutes": 60},
            "status": {"edges": [{"from": "ml/trainer", "to": "ml/store", "port": 9000,
                                  "bytes": 1200, "connections": 1, "retransmits": 2}]}
        }))
        .unwrap();
        let t = render(&[g]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("GRAPH"));
        assert!(
            lines[1].split_whitespace().eq([
                "ml",
                "ml/trainer",
                "ml/store",
                "9000",
                "1200",
                "1",
                "2"
            ]),
            "{t}"
        );
    }
}
