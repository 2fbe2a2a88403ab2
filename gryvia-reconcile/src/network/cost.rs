//! Network cost (GryviaNetworkCost): bytes that cross zones (`topology.kubernetes.io/zone` of
//! the two ends' nodes) and bytes that leave the cluster, priced per GiB and attributed to the
//! group (tenant, job or service) of the pod that sent or received them inside the cluster.
//! Pure, in integer micro-units of the currency: a sum of prices never drifts.

use std::collections::BTreeMap;

use gryvia_types::money::{Decimal, MICROS};
use gryvia_types::{CostGrouping, NetworkCostEntry};

/// Bytes in a GiB.
pub const GIB: i128 = 1 << 30;

/// The groups a pod's traffic is attributed to (those it has).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    /// Its tenant.
    pub team: Option<String>,
    /// Its job (GryviaAIJob).
    pub job: Option<String>,
    /// A Service that selects it.
    pub service: Option<String>,
}

impl Groups {
    /// The group of `grouping`.
    pub fn of(&self, grouping: CostGrouping) -> Option<&str> {
        match grouping {
            CostGrouping::Team => self.team.as_deref(),
            CostGrouping::Job => self.job.as_deref(),
            CostGrouping::Service => self.service.as_deref(),
        }
    }
}

/// Where one end of a flow is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A pod of the cluster: its groups and its node's zone (empty when the node has none).
    Pod {
        /// The pod's groups.
        groups: Groups,
        /// Its node's zone.
        zone: String,
    },
    /// A node's own address (host network): its zone.
    Node {
        /// The node's zone.
        zone: String,
    },
    /// Outside the cluster.
    External,
}

/// One flow's bytes between two ends, both directions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The end that opened the flow.
    pub local: End,
    /// The other end.
    pub remote: End,
    /// Bytes both ways.
    pub bytes: i64,
}

/// What a transfer counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crossing {
    /// Within one zone (or an end without a zone): free.
    Local,
    /// Between two zones.
    CrossZone,
    /// Between the cluster and outside.
    Egress,
}

fn zone(e: &End) -> Option<&str> {
    match e {
        End::Pod { zone, .. } | End::Node { zone } if !zone.is_empty() => Some(zone),
        _ => None,
    }
}

/// What `t` crosses.
pub fn crossing(t: &Transfer) -> Crossing {
    match (&t.local, &t.remote) {
        (End::External, End::External) => Crossing::Local,
        (End::External, _) | (_, End::External) => Crossing::Egress,
        (a, b) => match (zone(a), zone(b)) {
            (Some(x), Some(y)) if x != y => Crossing::CrossZone,
            _ => Crossing::Local,
        },
    }
}

/// The price of `bytes` at `per_gib` micro-units per GiB, in micro-units (rounded half up).
pub fn price(bytes: i64, per_gib_micros: i64) -> i64 {
    let p = (i128::from(bytes.max(0)) * i128::from(per_gib_micros.max(0)) + GIB / 2) / GIB;
    i64::try_from(p).unwrap_or(i64::MAX)
}

/// The cost entries of `transfers`, one per group of `grouping`, sorted by name. A transfer is
/// attributed to each in-cluster pod end's group (a cross-zone transfer between two groups
/// counts for both); bytes of pods without such a group go to `unattributed`.
pub fn entries(
    transfers: &[Transfer],
    grouping: CostGrouping,
    egress_per_gib: &Decimal,
    cross_zone_per_gib: &Decimal,
) -> Vec<NetworkCostEntry> {
    let egress_price = egress_per_gib.micros().unwrap_or(0);
    let cross_price = cross_zone_per_gib.micros().unwrap_or(0);
    let mut by: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for t in transfers {
        let crossing = crossing(t);
        if crossing == Crossing::Local {
            continue;
        }
        let mut owners: Vec<String> = [&t.local, &t.remote]
            .into_iter()
            .filter_map(|e| match e {
                End::Pod { groups, .. } => {
                    Some(groups.of(grouping).unwrap_or("unattributed").to_owned())
                }
                _ => None,
            })
            .collect();
        owners.dedup();
        for owner in owners {
            let e = by.entry(owner).or_default();
            match crossing {
                Crossing::Egress => e.0 = e.0.saturating_add(t.bytes.max(0)),
                Crossing::CrossZone => e.1 = e.1.saturating_add(t.bytes.max(0)),
                Crossing::Local => {}
            }
        }
    }
    by.into_iter()
        .map(|(name, (egress, cross))| NetworkCostEntry {
            name,
            egress_bytes: egress,
            cross_zone_bytes: cross,
            cost: Decimal::from_micros(
                price(egress, egress_price).saturating_add(price(cross, cross_price)),
            ),
        })
        .collect()
}

/// A cost in micro-units as a whole amount and cents, for one line of text.
pub fn describe(micros: i64) -> String {
    format!("{}.{:06}", micros / MICROS, micros % MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(team: &str, zone: &str) -> End {
        End::Pod {
            groups: Groups {
                team: Some(team.to_owned()),
                ..Groups::default()
            },
            zone: zone.to_owned(),
        }
    }

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    #[test]
    fn cross_zone_and_egress_bytes_are_priced_per_gib_by_team() {
        let gib = 1i64 << 30;
        let transfers = [
            // ml-a: 2 GiB to another zone, 1 GiB out.
            Transfer {
                local: pod("ml-a", "z1"),
                remote: pod("ml-b", "z2"),
                bytes: 2 * gib,
            },
            Transfer {
                local: pod("ml-a", "z1"),
                remote: End::External,
                bytes: gib,
            },
            // Same zone: free.
            Transfer {
                local: pod("ml-a", "z1"),
                remote: pod("ml-a", "z1"),
                bytes: 50 * gib,
            },
            // A node without a zone: not known to cross.
            Transfer {
                local: pod("ml-b", "z2"),
                remote: End::Node {
                    zone: String::new(),
                },
                bytes: gib,
            },
        ];
        let e = entries(&transfers, CostGrouping::Team, &d("0.09"), &d("0.01"));
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].name.as_str(), e[0].egress_bytes, e[0].cross_zone_bytes),
            ("ml-a", gib, 2 * gib)
        );
        assert_eq!(e[0].cost, d("0.11"));
        // ml-b pays for its side of the cross-zone transfer.
        assert_eq!(
            (e[1].name.as_str(), e[1].egress_bytes, e[1].cross_zone_bytes),
            ("ml-b", 0, 2 * gib)
        );
        assert_eq!(e[1].cost, d("0.02"));
    }

    #[test]
    fn pods_without_the_group_are_unattributed() {
        let t = Transfer {
            local: End::Pod {
                groups: Groups::default(),
                zone: "z1".into(),
            },
            remote: End::External,
            bytes: 10,
        };
        let e = entries(&[t], CostGrouping::Job, &d("1"), &d("1"));
        assert_eq!(e[0].name, "unattributed");
    }

    #[test]
    fn prices_round_half_up_in_micro_units() {
        assert_eq!(price(1 << 30, 90_000), 90_000);
        assert_eq!(price(1, 1_000_000), 0);
        assert_eq!(price(1 << 29, 1), 1);
        assert_eq!(price(-5, 10), 0);
        assert_eq!(describe(110_000), "0.110000");
    }

    #[test]
    fn what_crosses_what() {
        let c = |a: End, b: End| {
            crossing(&Transfer {
                local: a,
                remote: b,
                bytes: 1,
            })
        };
        assert_eq!(c(pod("a", "z1"), pod("b", "z2")), Crossing::CrossZone);
        assert_eq!(
            c(pod("a", "z1"), End::Node { zone: "z2".into() }),
            Crossing::CrossZone
        );
        assert_eq!(c(End::External, pod("a", "z1")), Crossing::Egress);
        assert_eq!(c(pod("a", ""), pod("b", "z2")), Crossing::Local);
    }
}
