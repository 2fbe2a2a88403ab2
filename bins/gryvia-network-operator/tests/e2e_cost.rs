//! End-to-end: the network-operator (the binary, under the RBAC of
//! `deploy/network-operator/rbac.yaml`) prices the GryviaFlowAggregates of two KWOK nodes in
//! two zones, written here under the collector's RBAC as the collector writes them: a job's pod
//! in one zone talks to a store pod in the other (directly and through its Service, each
//! connection counted once, from the store's node) and sends bytes out of the cluster. Two
//! GryviaNetworkCosts check the figures by tenant and by job, exact to the byte and the
//! micro-unit; the one with `usageRecords` writes the namespace's hourly GryviaUsageRecord.
//! Against a real control plane.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use common::{flow, pod_ip};
use gryvia_testsupport::{ClusterObject, KwokNodes, TestNamespace, wait_for};
use gryvia_types::{
    GryviaFlowAggregate, GryviaNetworkCost, GryviaUsageRecord, NetworkCostEntry, ZoneBytes,
    ZonePairBytes,
};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

/// Labels `name` (a node or a namespace) with `key: value`.
async fn label<K>(api: &Api<K>, name: &str, key: &str, value: &str)
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
    )
    .await
    .unwrap();
}

/// The cost's entry of `name`, once it has `cross` cross-zone bytes.
async fn entry_once(
    api: &Api<GryviaNetworkCost>,
    cost: &str,
    name: &str,
    cross: i64,
) -> NetworkCostEntry {
    wait_for("the cost's entry", Duration::from_secs(60), || async {
        let s = api.get(cost).await.ok()?.status?;
        s.entries
            .into_iter()
            .find(|e| e.name == name && e.cross_zone_bytes == cross)
    })
    .await
    .unwrap()
}

fn entry(name: &str, egress: i64, cross: i64, cost: &str) -> NetworkCostEntry {
    NetworkCostEntry {
        name: name.to_owned(),
        egress_bytes: egress,
        cross_zone_bytes: cross,
        cost: gryvia_types::money::Decimal::parse(cost).unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn cross_zone_and_egress_bytes_are_priced_by_tenant_and_job_and_written_as_usage_records() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "netcost").await.unwrap();
    let n = ns.name.as_str();
    let (operator_access, collector_access) = common::accesses(&client, n, "cost").await;
    let tenant = format!("team-{n}");
    label(
        &Api::<Namespace>::all(client.clone()),
        n,
        "gryvia.io/tenant",
        &tenant,
    )
    .await;
    let nodes = KwokNodes::create(&client, "netcost", 2, 1).await.unwrap();
    let (a, b) = (nodes.names[0].as_str(), nodes.names[1].as_str());
    let (za, zb) = (format!("{n}-a"), format!("{n}-b"));
    let node_api: Api<Node> = Api::all(client.clone());
    label(&node_api, a, "topology.kubernetes.io/zone", &za).await;
    label(&node_api, b, "topology.kubernetes.io/zone", &zb).await;

    // A job's pod in zone a; a store pod in zone b behind a Service.
    let trainer = pod_ip(
        &client,
        n,
        "trainer-0",
        a,
        json!({"gryvia.io/job-name": "trainer"}),
    )
    .await;
    let store = pod_ip(&client, n, "store-0", b, json!({"app": "store"})).await;
    let service_ip = common::store_service(&client, n).await;

    // By tenant, writing usage records; by job, not.
    let (by_team, by_job) = (format!("{n}-team"), format!("{n}-job"));
    let cost = |name: &str, group: &str, records: bool| {
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaNetworkCost",
               "metadata": {"name": name},
               "spec": {"groupBy": group, "egressPerGib": "0.09", "crossZonePerGib": "0.01",
                        "usageRecords": records}})
    };
    let _team = ClusterObject::create::<GryviaNetworkCost>(&client, cost(&by_team, "team", true))
        .await
        .unwrap();
    let _job = ClusterObject::create::<GryviaNetworkCost>(&client, cost(&by_job, "job", false))
        .await
        .unwrap();
    let _operator = common::operator(&operator_access, n, "network-operator-cost");

    // Node a: the trainer's side of its connections to the store (directly and through the
    // Service: the store's node counts both) and 2 GiB sent out of the cluster (8 GiB in, free).
    // Node b: the store's side of both connections, 1 GiB each both ways.
    let collector = collector_access.client().await.unwrap();
    let end = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10);
    let pod = |name: &str| format!("{n}/{name}");
    common::write_window(
        &collector,
        a,
        end,
        json!([
            flow(
                (&trainer, 45000),
                (&store, 9000),
                768 * MIB,
                256 * MIB,
                &pod("trainer-0")
            ),
            flow(
                (&trainer, 45001),
                (&service_ip, 80),
                512 * MIB,
                512 * MIB,
                &pod("trainer-0")
            ),
            flow(
                (&trainer, 51000),
                ("8.8.8.8", 443),
                2 * GIB,
                8 * GIB,
                &pod("trainer-0")
            ),
        ]),
    )
    .await;
    common::write_window(
        &collector,
        b,
        end,
        json!([
            flow(
                (&store, 9000),
                (&trainer, 45000),
                256 * MIB,
                768 * MIB,
                &pod("store-0")
            ),
            flow(
                (&store, 9000),
                (&trainer, 45001),
                512 * MIB,
                512 * MIB,
                &pod("store-0")
            ),
        ]),
    )
    .await;

    // By tenant: the trainer's 2 GiB out (0.18) and both pods' sides of 2 GiB across zones
    // (4 GiB, 0.04).
    let costs: Api<GryviaNetworkCost> = Api::all(client.clone());
    assert_eq!(
        entry_once(&costs, &by_team, &tenant, 4 * GIB).await,
        entry(&tenant, 2 * GIB, 4 * GIB, "0.22")
    );
    let status = costs.get(&by_team).await.unwrap().status.unwrap();
    assert_eq!(
        status.zone_pairs.iter().find(|p| p.from == za),
        Some(&ZonePairBytes {
            from: za.clone(),
            to: zb.clone(),
            bytes: 2 * GIB
        })
    );
    assert_eq!(
        status.egress_by_zone.iter().find(|z| z.zone == za),
        Some(&ZoneBytes {
            zone: za.clone(),
            bytes: 2 * GIB
        })
    );
    let metering = gryvia_types::conditions::find(&status.conditions, "Metering").unwrap();
    assert_eq!(
        (metering.status.as_str(), metering.reason.as_str()),
        ("True", "WritesUsageRecords")
    );
    // By job: the trainer's side; the store has no job.
    assert_eq!(
        entry_once(&costs, &by_job, &format!("{n}/trainer"), 2 * GIB).await,
        entry(&format!("{n}/trainer"), 2 * GIB, 2 * GIB, "0.2")
    );
    let job_status = costs.get(&by_job).await.unwrap().status.unwrap();
    assert!(job_status.hours.is_empty() && job_status.conditions.is_empty());

    // The namespace's usage record of this hour, open, as invoices read it.
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("gryvia.io/network-cost={by_team}"));
    let record = wait_for("the usage record", Duration::from_secs(60), || async {
        records
            .list(&selector)
            .await
            .ok()?
            .items
            .into_iter()
            .find(|r| {
                r.spec.namespace == n
                    && r.spec
                        .network
                        .as_ref()
                        .is_some_and(|x| x.cross_zone_bytes == 4 * GIB)
            })
    })
    .await
    .unwrap();
    let net = record.spec.network.clone().unwrap();
    assert_eq!(
        (net.egress_bytes, net.amount.as_str(), net.currency.as_str()),
        (2 * GIB, "0.22", "USD")
    );
    assert_eq!(
        (record.spec.tenant.as_str(), record.spec.gpu_count),
        (tenant.as_str(), 0)
    );
    assert_eq!(record.spec.end_time, None);
    assert_eq!(record.spec.workload.name, by_team);
    assert!(
        record.metadata.owner_references.is_none(),
        "a record outlives its cost"
    );

    // The same windows written again are not counted again; a new window adds.
    common::write_window(
        &collector,
        a,
        end + jiff::SignedDuration::from_secs(10),
        json!([flow(
            (&trainer, 51001),
            ("8.8.8.8", 443),
            GIB,
            0,
            &pod("trainer-0")
        )]),
    )
    .await;
    let grown = wait_for("the next window", Duration::from_secs(60), || async {
        let s = costs.get(&by_team).await.ok()?.status?;
        s.entries
            .into_iter()
            .find(|e| e.name == tenant && e.egress_bytes == 3 * GIB)
    })
    .await
    .unwrap();
    assert_eq!(grown, entry(&tenant, 3 * GIB, 4 * GIB, "0.31"));

    for r in records.list(&selector).await.unwrap().items {
        let _ = records
            .delete(&r.metadata.name.unwrap(), &DeleteParams::default())
            .await;
    }
    for node in [a, b] {
        let _ = Api::<GryviaFlowAggregate>::all(client.clone())
            .delete(node, &DeleteParams::background())
            .await;
    }
}
