//! GPU nodes as the queue sees them: what each advertises (whole GPUs, time-slicing replicas,
//! MIG slices), what pods outside the queue's admissions already use, and whether it counts
//! as capacity at all; and the gang placement of a job's workers.

use std::collections::BTreeMap;
use std::fmt;

use gryvia_types::labels;
use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use super::{Fraction, Share};
use crate::facts::{self, PodView};

/// Why a node does not count as capacity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Unavailable {
    /// Quarantined by a health check.
    Quarantined,
    /// Cordoned (by hand, or for maintenance).
    Cordoned,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Quarantined => "quarantined",
            Self::Cordoned => "cordoned",
        })
    }
}

/// The extended resource a worker requests.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Slot {
    /// `nvidia.com/gpu`: whole GPUs.
    Gpu,
    /// `nvidia.com/gpu.shared`: time-slicing replicas.
    Shared,
    /// `nvidia.com/mig-<profile>`: a MIG slice.
    Mig(String),
}

impl Slot {
    /// The resource name.
    pub fn resource(&self) -> String {
        match self {
            Self::Gpu => labels::NVIDIA_GPU_RESOURCE.to_owned(),
            Self::Shared => labels::NVIDIA_GPU_SHARED_RESOURCE.to_owned(),
            Self::Mig(p) => format!("{}{p}", labels::NVIDIA_MIG_PREFIX),
        }
    }

    /// The slot of a resource name (`None` for one that is not a GPU resource).
    pub fn of_resource(name: &str) -> Option<Self> {
        if name == labels::NVIDIA_GPU_RESOURCE {
            Some(Self::Gpu)
        } else if name == labels::NVIDIA_GPU_SHARED_RESOURCE {
            Some(Self::Shared)
        } else {
            name.strip_prefix(labels::NVIDIA_MIG_PREFIX)
                .map(|p| Self::Mig(p.to_owned()))
        }
    }
}

/// GPU resources on a node, by resource; in JSON a map of resource names
/// (`{"nvidia.com/gpu": 8, "nvidia.com/mig-3g.40gb": 2}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BTreeMap<String, u32>", into = "BTreeMap<String, u32>")]
pub struct Used(pub BTreeMap<Slot, u32>);

impl From<Used> for BTreeMap<String, u32> {
    fn from(u: Used) -> Self {
        u.0.into_iter().map(|(s, n)| (s.resource(), n)).collect()
    }
}

impl TryFrom<BTreeMap<String, u32>> for Used {
    type Error = String;

    fn try_from(m: BTreeMap<String, u32>) -> Result<Self, Self::Error> {
        m.into_iter()
            .map(|(name, n)| {
                Slot::of_resource(&name)
                    .map(|s| (s, n))
                    .ok_or_else(|| format!("{name:?} is not a GPU resource (nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile>)"))
            })
            .collect::<Result<_, _>>()
            .map(Used)
    }
}

impl Used {
    /// In use of `slot`.
    pub fn of(&self, slot: &Slot) -> u32 {
        if *slot == Slot::Gpu {
            // Whole GPUs sort first: the common case without a tree search.
            return match self.0.first_key_value() {
                Some((Slot::Gpu, n)) => *n,
                _ => 0,
            };
        }
        self.0.get(slot).copied().unwrap_or(0)
    }

    /// Adds `n` of `slot`.
    pub fn add(&mut self, slot: &Slot, n: u32) {
        *self.0.entry(slot.clone()).or_insert(0) += n;
    }

    /// Takes `n` of `slot` away (not below 0).
    pub fn remove(&mut self, slot: &Slot, n: u32) {
        if let Some(v) = self.0.get_mut(slot) {
            *v = v.saturating_sub(n);
        }
    }
}

/// A GPU node as the queue sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// Node name.
    pub name: String,
    /// `nvidia.com/gpu.product`.
    pub product: Option<String>,
    /// Allocatable GPU resources (whole GPUs, time-slicing replicas, MIG slices).
    pub allocatable: Used,
    /// Time-slicing replicas per GPU (`nvidia.com/gpu.replicas`; 0 when not shared).
    pub replicas: u32,
    /// Memory of one GPU in MiB (`nvidia.com/gpu.memory`), to pick a MIG slice for a
    /// fraction.
    pub gpu_memory_mib: Option<u64>,
    /// Why it does not count as capacity (`None`: it does).
    pub unavailable: Option<Unavailable>,
    /// The GryviaReservation holding it: only that reservation's jobs may use it.
    pub reserved_by: Option<String>,
    /// GPU resources held by live pods that are not workers of a job the queue admitted
    /// (those are counted from their admissions).
    pub used: Used,
    /// Its labels, for jobs with a `nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Its `NoSchedule` and `NoExecute` taints other than those the queue reads itself (GPU
    /// health, reservations, cordon) and the GPU taint every GPU worker tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<NodeTaint>,
}

/// A taint that keeps workers off a node unless they tolerate it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTaint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A job's toleration, as Kubernetes matches it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobToleration {
    /// Key (empty with `Exists`: every taint).
    #[serde(default)]
    pub key: String,
    /// `Exists` or `Equal` (the default).
    #[serde(default)]
    pub operator: String,
    /// Value for `Equal`.
    #[serde(default)]
    pub value: String,
    /// Effect (empty: every effect).
    #[serde(default)]
    pub effect: String,
}

impl JobToleration {
    /// Reads a pod toleration.
    pub fn of(t: &k8s_openapi::api::core::v1::Toleration) -> Self {
        Self {
            key: t.key.clone().unwrap_or_default(),
            operator: t.operator.clone().unwrap_or_default(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
        }
    }

    /// Whether it tolerates `taint`.
    pub fn tolerates(&self, taint: &NodeTaint) -> bool {
        let exists = self.operator == "Exists";
        (self.effect.is_empty() || self.effect == taint.effect)
            && if self.key.is_empty() {
                exists
            } else {
                self.key == taint.key
                    && (exists || self.value == taint.value.as_deref().unwrap_or_default())
            }
    }
}

/// Taints the queue reads itself, or that every GPU worker tolerates.
const HANDLED_TAINTS: [&str; 4] = [
    labels::GPU_UNHEALTHY_TAINT,
    labels::RESERVED_TAINT,
    "node.kubernetes.io/unschedulable",
    labels::NVIDIA_GPU_RESOURCE,
];

/// GPU resources a pod requests (limits where requests are absent, as for extended
/// resources).
pub fn pod_gpu_resources(pod: &(impl PodView + ?Sized)) -> Used {
    let mut used = Used::default();
    pod.each_asked(&mut |_, name, q| {
        if let (Some(slot), Ok(n)) = (Slot::of_resource(name), q.0.trim().parse::<u32>()) {
            used.add(&slot, n);
        }
    });
    used
}

impl NodeCapacity {
    /// Reads a node and the live pods on it that the queue does not account for itself
    /// (every live pod on the node but the workers of admitted jobs).
    pub fn of<'a, P: PodView + 'a>(node: &Node, others: impl IntoIterator<Item = &'a P>) -> Self {
        let mut allocatable = Used::default();
        let status_alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        for (name, q) in status_alloc.into_iter().flatten() {
            if let (Some(slot), Ok(n)) = (Slot::of_resource(name), q.0.trim().parse::<u32>()) {
                allocatable.add(&slot, n);
            }
        }
        if allocatable.of(&Slot::Gpu) == 0 {
            let gpus = u32::try_from(facts::gpus_allocatable(node)).unwrap_or(0);
            if gpus > 0 {
                allocatable.add(&Slot::Gpu, gpus);
            }
        }
        let label = |k: &str| {
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .cloned()
        };
        let mut used = Used::default();
        for pod in others {
            if facts::pod_phase(pod).is_live() {
                for (slot, n) in pod_gpu_resources(pod).0 {
                    used.add(&slot, n);
                }
            }
        }
        let unavailable = if facts::quarantined_by(node).is_some() {
            Some(Unavailable::Quarantined)
        } else if facts::cordoned(node) {
            Some(Unavailable::Cordoned)
        } else {
            None
        };
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            product: facts::gpu_product(node).map(str::to_owned),
            allocatable,
            replicas: label(labels::NVIDIA_GPU_REPLICAS)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            gpu_memory_mib: label(labels::NVIDIA_GPU_MEMORY).and_then(|v| v.parse().ok()),
            unavailable,
            reserved_by: facts::reservation_taint(node),
            used,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .filter(|t| !HANDLED_TAINTS.contains(&t.key.as_str()))
                .map(|t| NodeTaint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect(),
        }
    }

    /// Whether workers with `node_selector` and `tolerations` may run here: every selected
    /// label matches, every taint is tolerated.
    pub fn admits(
        &self,
        node_selector: &BTreeMap<String, String>,
        tolerations: &[JobToleration],
    ) -> bool {
        node_selector
            .iter()
            .all(|(k, v)| self.labels.get(k) == Some(v))
            && self
                .taints
                .iter()
                .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
    }

    /// The resource and count one worker of `share` requests on this node: whole GPUs as
    /// `nvidia.com/gpu`; a fraction as the smallest MIG slice with at least that part of the
    /// GPU's memory, else as time-slicing replicas (`fraction x replicas`, at least one).
    /// `None` when the node offers nothing that fits.
    pub fn slot_for(&self, share: Share) -> Option<(Slot, u32)> {
        match share {
            Share::Gpus(0) => None,
            Share::Gpus(n) => (self.allocatable.of(&Slot::Gpu) > 0).then_some((Slot::Gpu, n)),
            Share::Fraction(f) => self
                .mig_slice(f)
                .map(|p| (Slot::Mig(p), 1))
                .or_else(|| self.shared_slots(f).map(|k| (Slot::Shared, k))),
        }
    }

    fn mig_slice(&self, f: Fraction) -> Option<String> {
        let memory_gib = self.gpu_memory_mib? as f64 / 1024.0;
        let want = memory_gib * f.value();
        self.allocatable
            .0
            .keys()
            .filter_map(|s| match s {
                Slot::Mig(p) => Some((mig_memory_gb(p)?, p)),
                _ => None,
            })
            // A slice named "40gb" on a GPU of 79.6 GiB is half of it: allow 2%.
            .filter(|(gb, _)| *gb >= want * 0.98)
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))
            .map(|(_, p)| p.clone())
    }

    fn shared_slots(&self, f: Fraction) -> Option<u32> {
        if self.allocatable.of(&Slot::Shared) == 0 || self.replicas == 0 {
            return None;
        }
        Some((self.replicas.div_ceil(f.denominator())).max(1))
    }

    /// Free units of `slot`.
    pub fn free(&self, slot: &Slot) -> u32 {
        self.allocatable.of(slot).saturating_sub(self.used.of(slot))
    }

    /// Whether a job with `reservation` may place workers here.
    pub fn usable_by(&self, reservation: Option<&str>) -> bool {
        self.unavailable.is_none()
            && match &self.reserved_by {
                None => true,
                Some(r) => reservation == Some(r.as_str()),
            }
    }
}

/// Memory of a MIG profile such as `3g.40gb`, in GB.
fn mig_memory_gb(profile: &str) -> Option<f64> {
    let (_, mem) = profile.split_once('.')?;
    mem.strip_suffix("gb")?.parse().ok()
}

/// Where the workers of a gang go, or how far it falls short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The node of each worker.
    Placed(Vec<String>),
    /// Not enough room: how many workers fit, on how many nodes.
    Short {
        /// Workers that would fit.
        fit: u32,
        /// Nodes with room for at least one.
        nodes_with_room: u32,
    },
}

/// Places `workers` workers of `per` units of `slot` on `nodes` (indices into `all`), all or
/// none. One worker goes on the node with the least room that holds it (best fit, keeping
/// large holes for large gangs); a larger gang fills the nodes with the most room first
/// (fewest nodes), its last workers again best fit.
pub fn place(
    all: &[NodeCapacity],
    nodes: impl Iterator<Item = usize>,
    slot: &Slot,
    per: u32,
    workers: u32,
) -> Placement {
    if per == 0 {
        return Placement::Placed(Vec::new());
    }
    let mut room: Vec<(u32, &str)> = nodes
        .map(|i| (all[i].free(slot) / per, all[i].name.as_str()))
        .filter(|(r, _)| *r > 0)
        .collect();
    let total: u32 = room.iter().map(|(r, _)| *r).sum();
    if total < workers {
        return Placement::Short {
            fit: total,
            nodes_with_room: u32::try_from(room.len()).unwrap_or(u32::MAX),
        };
    }
    let mut placed = Vec::with_capacity(workers as usize);
    let mut left = workers;
    // Most room first; the name breaks ties so the choice is deterministic.
    room.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut i = 0;
    while left > 0 {
        // The rest fits on one node: the one with the least room that holds it.
        if let Some(best) = room[i..]
            .iter()
            .filter(|(r, _)| *r >= left)
            .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)))
        {
            placed.extend(std::iter::repeat_n(best.1.to_owned(), left as usize));
            break;
        }
        let (r, name) = room[i];
        placed.extend(std::iter::repeat_n(name.to_owned(), r as usize));
        left -= r;
        i += 1;
    }
    Placement::Placed(placed)
}
