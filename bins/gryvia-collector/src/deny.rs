//! GryviaFlowPolicy `action: deny` on this node: the policies as the network-operator resolved
//! them (watched), their entries for this node's pods loaded into the eBPF deny map, and the
//! drops per policy read back for the node's GryviaFabricSignal.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_ebpf::{
    Collector, DIRECTION_EGRESS, DIRECTION_INGRESS, DenyEntry, DenyKey, MAX_DENY_RULES,
};
use gryvia_reconcile::network::policy::{assign_counters, deny_entries, deny_policies};
use gryvia_types::{GryviaFlowPolicy, ResolvedDeny};
use kube::api::Api;
use tracing::warn;

/// Deny policies by `namespace/name`.
pub type DenyPolicies = BTreeMap<String, ResolvedDeny>;

/// Watches every GryviaFlowPolicy and sends the deny ones that carry resolved addresses on
/// `tx` whenever they change.
pub async fn follow_policies(
    client: kube::Client,
    tx: tokio::sync::watch::Sender<Option<DenyPolicies>>,
) {
    use futures::{FutureExt, StreamExt};
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let (store, writer) = reflector::store::<GryviaFlowPolicy>();
    let events = reflector(
        writer,
        watcher(
            Api::<GryviaFlowPolicy>::all(client),
            watcher::Config::default(),
        ),
    )
    .default_backoff();
    let mut events = std::pin::pin!(events);
    while let Some(e) = events.next().await {
        match e {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
            }
            Ok(_) => continue,
            Err(err) => {
                warn!(error = %err, "watch flow policies");
                continue;
            }
        }
        if store.wait_until_ready().now_or_never().is_none() {
            continue;
        }
        let next = deny_policies(store.state().iter().map(AsRef::as_ref));
        tx.send_if_modified(|cur| {
            let new = cur.as_ref() != Some(&next);
            if new {
                *cur = Some(next);
            }
            new
        });
    }
}

/// What is loaded: a stable drop-counter index per policy and the entries of the last load.
#[derive(Default)]
pub struct Denying {
    index: BTreeMap<String, u32>,
    /// Indexes given out since the last load: their counters start at zero.
    fresh: Vec<u32>,
    loaded: Option<Vec<DenyEntry>>,
    /// Policies with at least one entry on this node.
    active: BTreeSet<String>,
}

impl Denying {
    /// The programs were started again: their deny map is empty.
    pub fn reloaded(&mut self) {
        self.loaded = None;
    }

    /// Loads the entries of `policies` for the pods at `local` addresses, when they differ from
    /// what is loaded.
    ///
    /// # Errors
    /// When the kernel refuses the map writes (the previous entries stay).
    pub fn apply(
        &mut self,
        collector: &mut Collector,
        policies: &DenyPolicies,
        local: &BTreeSet<String>,
    ) -> anyhow::Result<()> {
        let (fresh, without) = assign_counters(&mut self.index, policies.keys(), MAX_DENY_RULES);
        self.fresh.extend(fresh);
        for key in without {
            warn!(policy = %key, "more deny policies than the {MAX_DENY_RULES} drop counters: not enforced on this node");
        }
        let mut entries = Vec::new();
        let mut active = BTreeSet::new();
        for (key, deny) in policies {
            let Some(&rule) = self.index.get(key) else {
                continue;
            };
            for e in deny_entries(deny, |ip| local.contains(ip)) {
                active.insert(key.clone());
                entries.push(DenyEntry {
                    key: DenyKey {
                        direction: if e.egress {
                            DIRECTION_EGRESS
                        } else {
                            DIRECTION_INGRESS
                        },
                        protocol: e.protocol,
                        port: e.port,
                        local: e.local.octets(),
                        remote: e.remote.octets(),
                    },
                    remote_prefix: e.prefix,
                    rule,
                });
            }
        }
        self.active = active;
        if !self.fresh.is_empty() {
            collector.reset_drops(&self.fresh)?;
            self.fresh.clear();
        }
        if self.loaded.as_ref() == Some(&entries) {
            return Ok(());
        }
        collector.set_deny(&entries)?;
        self.loaded = Some(entries);
        Ok(())
    }

    /// Packets dropped per policy with entries on this node.
    pub fn drops(&self, collector: &Collector) -> BTreeMap<String, i64> {
        let counts = match collector.deny_drops() {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "read the deny drop counters");
                return BTreeMap::new();
            }
        };
        self.active
            .iter()
            .filter_map(|k| {
                let i = usize::try_from(*self.index.get(k)?).ok()?;
                Some((
                    k.clone(),
                    i64::try_from(*counts.get(i)?).unwrap_or(i64::MAX),
                ))
            })
            .collect()
    }
}

/// The deny side of a collector: the policies followed, this node's pod addresses, and what is
/// loaded.
pub struct Enforcer {
    denying: Denying,
    /// Addresses of this node's pods (not on the host's network).
    pub local: BTreeSet<String>,
    /// The deny policies, as they change.
    pub rx: tokio::sync::watch::Receiver<Option<DenyPolicies>>,
    /// Kept while nothing follows the policies (no Kubernetes), so `rx` never closes.
    _tx: Option<tokio::sync::watch::Sender<Option<DenyPolicies>>>,
}

impl Enforcer {
    /// Follows the deny policies through `client` (nothing without one).
    pub fn new(client: Option<&kube::Client>) -> Self {
        let (tx, rx) = tokio::sync::watch::channel(None);
        let tx = match client {
            Some(c) => {
                tokio::spawn(follow_policies(c.clone(), tx));
                None
            }
            None => Some(tx),
        };
        Enforcer {
            denying: Denying::default(),
            local: BTreeSet::new(),
            rx,
            _tx: tx,
        }
    }

    /// Loads the entries of the policies for this node's pods; a refusal is logged and the
    /// previous entries stay.
    pub fn enforce(&mut self, collector: &mut Collector) {
        let policies = self.rx.borrow_and_update().clone().unwrap_or_default();
        if let Err(e) = self.denying.apply(collector, &policies, &self.local) {
            warn!(error = %format!("{e:#}"), "load the deny policies' entries");
        }
    }

    /// The programs were started again: loads the entries into their new map.
    pub fn reloaded(&mut self, collector: &mut Collector) {
        self.denying.reloaded();
        self.enforce(collector);
    }

    /// Packets dropped per policy with entries on this node.
    pub fn drops(&self, collector: &Collector) -> BTreeMap<String, i64> {
        self.denying.drops(collector)
    }
}
