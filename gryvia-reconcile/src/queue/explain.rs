//! Why a job is not admitted, in numbers: the text of `status.queue.reason`.

use std::collections::BTreeMap;
use std::fmt;

use super::{JobKey, Milli, ONE_GPU, Share, Unavailable, gpus_text};

/// Why a job is not admitted (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// The queue has no quota entry for the product the job needs.
    NoQuotaEntry {
        /// The queue.
        queue: String,
        /// The product asked for (`None`: any).
        gpu_type: Option<String>,
    },
    /// Not enough quota.
    Quota {
        /// What the job needs.
        need: Milli,
        /// The queue.
        queue: String,
        /// The quota entry.
        entry: String,
        /// Used of it now.
        used: Milli,
        /// Its nominal.
        nominal: Milli,
        /// Its borrowing limit.
        borrowing_limit: Option<Milli>,
        /// The cohort and what its pool has free.
        cohort: Option<(String, Milli)>,
    },
    /// Quota is there, room on nodes is not.
    Placement {
        /// Workers.
        workers: u32,
        /// What each asks for.
        share: Share,
        /// The product (`None`: any).
        product: Option<String>,
        /// Workers that would fit now.
        fit: u32,
        /// Nodes with room for one worker or more.
        nodes_with_room: u32,
        /// Nodes of the product.
        nodes: u32,
        /// Nodes of the product that do not count, by why.
        unavailable: BTreeMap<Unavailable, u32>,
        /// Nodes of the product held by a reservation of someone else.
        reserved: u32,
        /// Nodes of the product its `nodeSelector` or tolerations rule out.
        excluded: u32,
    },
    /// The head of a StrictFIFO queue is blocked, and this job is behind it.
    Behind {
        /// The head.
        head: JobKey,
    },
    /// It would fit, but would delay the start of a blocked job ahead of it.
    WouldDelay {
        /// That job.
        head: JobKey,
    },
    /// It would fit, but a waiting job ahead of it, ranked above it, would preempt it at once
    /// to make room for itself: admitting it would only start a job to stop it.
    PreemptedAtOnce {
        /// That job.
        by: JobKey,
    },
    /// It would borrow quota a lender of its cohort needs for its own pending jobs (and would
    /// reclaim at once).
    LenderNeeds {
        /// The lending queue.
        queue: String,
    },
    /// Lower-priority jobs are being preempted for it.
    Preempting {
        /// The victims.
        victims: Vec<JobKey>,
    },
    /// Jobs preempted earlier still hold what it needs.
    WaitingForPreempted {
        /// How many.
        jobs: usize,
    },
}

fn plural(n: u32, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Shortfall {
    /// The text of [`Shortfall::Placement`].
    fn fmt_placement(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self::Placement {
            workers,
            share,
            product,
            fit,
            nodes_with_room,
            nodes,
            unavailable,
            reserved,
            excluded,
        } = self
        else {
            return Ok(());
        };
        let product = product.as_deref().unwrap_or("any product");
        let _ = nodes_with_room;
        write!(
            f,
            "needs {} x {} of {product}; room for {} on {} of {product}",
            plural(*workers, "worker", "workers"),
            share.describe(),
            plural(*fit, "worker", "workers"),
            plural(*nodes, "node", "nodes"),
        )?;
        let mut sep = ": ";
        for (why, n) in unavailable {
            write!(f, "{sep}{n} {why}")?;
            sep = ", ";
        }
        if *reserved > 0 {
            write!(f, "{sep}{reserved} reserved")?;
            sep = ", ";
        }
        if *excluded > 0 {
            write!(
                f,
                "{sep}{excluded} ruled out by its nodeSelector or tolerations"
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoQuotaEntry { queue, gpu_type } => match gpu_type {
                Some(t) => write!(f, "queue {queue} has no quota for GPU type {t}"),
                None => write!(f, "queue {queue} has no GPU quota"),
            },
            Self::Quota {
                need,
                queue,
                entry,
                used,
                nominal,
                borrowing_limit,
                cohort,
            } => {
                let free = (nominal - used).max(0);
                write!(
                    f,
                    "needs {} {} of {entry}; queue {queue} has {} of {} nominal free",
                    gpus_text(*need),
                    if *need == ONE_GPU { "GPU" } else { "GPUs" },
                    gpus_text(free),
                    gpus_text(*nominal)
                )?;
                if let Some((c, pool_free)) = cohort {
                    write!(f, ", cohort {c} lends {}", gpus_text(*pool_free))?;
                    if let Some(l) = borrowing_limit {
                        write!(f, " (borrowing limit {})", gpus_text(*l))?;
                    }
                }
                Ok(())
            }
            Self::Placement { .. } => self.fmt_placement(f),
            Self::Behind { head } => {
                write!(f, "behind {head}, which does not fit yet (StrictFIFO)")
            }
            Self::WouldDelay { head } => {
                write!(f, "fits, but would delay the expected start of {head}")
            }
            Self::PreemptedAtOnce { by } => {
                write!(
                    f,
                    "fits, but {by}, waiting ahead of it, would preempt it at once"
                )
            }
            Self::LenderNeeds { queue } => write!(
                f,
                "would borrow quota that queue {queue} needs for its own pending jobs"
            ),
            Self::Preempting { victims } => {
                let names: Vec<String> = victims.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "preempting {} ({}); starts when their GPUs are released",
                    plural(
                        u32::try_from(victims.len()).unwrap_or(u32::MAX),
                        "job",
                        "jobs"
                    ),
                    names.join(", ")
                )
            }
            Self::WaitingForPreempted { jobs } => write!(
                f,
                "waiting for {} to release their GPUs",
                plural(
                    u32::try_from(*jobs).unwrap_or(u32::MAX),
                    "preempted job",
                    "preempted jobs"
                )
            ),
        }
    }
}
