//! Quota accounting: what each queue uses per quota entry, and what its cohort lends.
//!
//! A queue's `nominal` is split into a guaranteed part (`nominal - lendable`), which only the
//! queue itself can use, and a lendable part, which goes into its cohort's pool. Usage above
//! the guaranteed part draws from the pool, whoever's it is; a queue borrows when its usage
//! exceeds its nominal. So: a queue uses at most `nominal + borrowingLimit`, the cohort's
//! pool is never overdrawn, and no queue lends more than its `lendingLimit`.

use std::collections::{BTreeMap, HashMap};

use super::{Milli, QueueInfo, QuotaEntry};

/// Where a request falls short of quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaShort {
    /// What the queue uses of the entry now.
    pub used: Milli,
    /// The entry's nominal.
    pub nominal: Milli,
    /// The entry's borrowing limit.
    pub borrowing_limit: Option<Milli>,
    /// The queue's cohort and what its pool has free (`None` without a cohort).
    pub cohort: Option<(String, Milli)>,
}

/// Quota usage of every queue.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// Queue name -> its info (entries by gpuType) and usage per entry.
    queues: HashMap<String, Account>,
    /// Cohort -> gpuType -> pool.
    pools: HashMap<String, HashMap<String, Pool>>,
}

#[derive(Clone, Debug)]
struct Account {
    cohort: Option<String>,
    entries: BTreeMap<String, QuotaEntry>,
    used: BTreeMap<String, Milli>,
    /// Used over the quota by tiers with a `quotaOverride` (outside the cohort's pool).
    over: BTreeMap<String, Milli>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Pool {
    /// Sum of the members' lendable quota.
    size: Milli,
    /// Sum of the members' usage above their guaranteed part.
    drawn: Milli,
}

fn above(used: Milli, floor: Milli) -> Milli {
    (used - floor).max(0)
}

impl Ledger {
    /// A ledger of `queues`, nothing used.
    pub fn new(queues: &[QueueInfo]) -> Self {
        let mut ledger = Self::default();
        for q in queues {
            let entries: BTreeMap<String, QuotaEntry> = q
                .resources
                .iter()
                .map(|r| (r.gpu_type.clone(), r.clone()))
                .collect();
            if let Some(c) = &q.cohort {
                for e in entries.values() {
                    ledger
                        .pools
                        .entry(c.clone())
                        .or_default()
                        .entry(e.gpu_type.clone())
                        .or_default()
                        .size += e.lendable();
                }
            }
            ledger.queues.insert(
                q.name.clone(),
                Account {
                    cohort: q.cohort.clone(),
                    entries,
                    used: BTreeMap::new(),
                    over: BTreeMap::new(),
                },
            );
        }
        ledger
    }

    /// Checks whether `queue` can take `amount` more of `entry`: `Ok` with the part of it
    /// that would be borrowed, or where it falls short.
    pub fn check(&self, queue: &str, entry: &str, amount: Milli) -> Result<Milli, QuotaShort> {
        let Some(acct) = self.queues.get(queue) else {
            return Err(QuotaShort {
                used: 0,
                nominal: 0,
                borrowing_limit: Some(0),
                cohort: None,
            });
        };
        let Some(e) = acct.entries.get(entry) else {
            return Err(QuotaShort {
                used: 0,
                nominal: 0,
                borrowing_limit: Some(0),
                cohort: None,
            });
        };
        let used = acct.used.get(entry).copied().unwrap_or(0);
        let after = used + amount;
        let short = |pool_free| QuotaShort {
            used,
            nominal: e.nominal,
            borrowing_limit: e.borrowing_limit,
            cohort: acct.cohort.clone().map(|c| (c, pool_free)),
        };
        let Some(cohort) = &acct.cohort else {
            return if after <= e.nominal {
                Ok(0)
            } else {
                Err(short(0))
            };
        };
        let pool = self
            .pools
            .get(cohort)
            .and_then(|p| p.get(entry))
            .copied()
            .unwrap_or_default();
        let g = e.guaranteed();
        let drawn_after = pool.drawn - above(used, g) + above(after, g);
        let within_borrowing = e.borrowing_limit.is_none_or(|l| after <= e.nominal + l);
        if drawn_after <= pool.size && within_borrowing {
            Ok(above(after, e.nominal) - above(used, e.nominal))
        } else {
            Err(short((pool.size - pool.drawn).max(0)))
        }
    }

    /// Whether `queue` can take `amount` more of `entry` over its quota for a tier that may
    /// exceed it by `percent` of the entry's nominal (what such jobs use over it counts
    /// against that allowance, never against the cohort's pool).
    pub fn check_over(&self, queue: &str, entry: &str, amount: Milli, percent: i32) -> bool {
        let Some(acct) = self.queues.get(queue) else {
            return false;
        };
        let Some(e) = acct.entries.get(entry) else {
            return false;
        };
        let allowance = e.nominal.saturating_mul(Milli::from(percent.clamp(0, 100))) / 100;
        acct.over.get(entry).copied().unwrap_or(0) + amount <= allowance
    }

    /// Charges `amount` (negative: gives back) of `entry` to `queue` over its quota.
    pub fn charge_over(&mut self, queue: &str, entry: &str, amount: Milli) {
        if amount == 0 {
            return;
        }
        if let Some(acct) = self.queues.get_mut(queue) {
            let o = acct.over.entry(entry.to_owned()).or_insert(0);
            *o = (*o + amount).max(0);
        }
    }

    /// Charges `amount` of `entry` to `queue` (no check: admitted jobs are charged as they
    /// are, even over a quota that shrank since).
    pub fn charge(&mut self, queue: &str, entry: &str, amount: Milli) {
        self.adjust(queue, entry, amount);
    }

    /// Gives `amount` of `entry` back.
    pub fn release(&mut self, queue: &str, entry: &str, amount: Milli) {
        self.adjust(queue, entry, -amount);
    }

    fn adjust(&mut self, queue: &str, entry: &str, delta: Milli) {
        let Some(acct) = self.queues.get_mut(queue) else {
            return;
        };
        if !acct.used.contains_key(entry) {
            acct.used.insert(entry.to_owned(), 0);
        }
        let Some(used) = acct.used.get_mut(entry) else {
            return;
        };
        let before = *used;
        *used = (*used + delta).max(0);
        let after = *used;
        if let (Some(c), Some(e)) = (&acct.cohort, acct.entries.get(entry)) {
            let g = e.guaranteed();
            if let Some(pool) = self.pools.get_mut(c).and_then(|p| p.get_mut(entry)) {
                pool.drawn += above(after, g) - above(before, g);
            }
        }
    }

    /// Whether `queue` uses more of `entry` than its nominal.
    pub fn borrowing(&self, queue: &str, entry: &str) -> bool {
        self.queues.get(queue).is_some_and(|a| {
            a.entries
                .get(entry)
                .is_some_and(|e| a.used.get(entry).copied().unwrap_or(0) > e.nominal)
        })
    }

    /// Whether `queue` could take `amount` more of `entry` within its nominal alone (what
    /// reclaiming lent quota can restore).
    pub fn within_nominal(&self, queue: &str, entry: &str, amount: Milli) -> bool {
        self.queues.get(queue).is_some_and(|a| {
            a.entries
                .get(entry)
                .is_some_and(|e| a.used.get(entry).copied().unwrap_or(0) + amount <= e.nominal)
        })
    }

    /// The cohort of `queue`.
    pub fn cohort(&self, queue: &str) -> Option<&str> {
        self.queues.get(queue)?.cohort.as_deref()
    }

    /// Per entry of `queue`: used, borrowed (above nominal) and lent (its idle lendable quota
    /// that cohort members borrow; borrowed quota is attributed to lenders in name order).
    pub fn summary(&self, queue: &str) -> BTreeMap<String, (Milli, Milli, Milli)> {
        let Some(acct) = self.queues.get(queue) else {
            return BTreeMap::new();
        };
        acct.entries
            .values()
            .map(|e| {
                let used = acct.used.get(&e.gpu_type).copied().unwrap_or(0);
                let over = acct.over.get(&e.gpu_type).copied().unwrap_or(0);
                let lent = acct
                    .cohort
                    .as_deref()
                    .map_or(0, |c| self.lent(c, &e.gpu_type, queue));
                (
                    e.gpu_type.clone(),
                    (used + over, above(used, e.nominal) + over, lent),
                )
            })
            .collect()
    }

    fn lent(&self, cohort: &str, entry: &str, queue: &str) -> Milli {
        let mut names: Vec<&String> = self
            .queues
            .iter()
            .filter(|(_, a)| a.cohort.as_deref() == Some(cohort))
            .map(|(n, _)| n)
            .collect();
        names.sort();
        let members = names
            .into_iter()
            .filter_map(|n| Some((n, self.queues.get(n)?)))
            .filter_map(|(n, a)| {
                Some((
                    n,
                    a.entries.get(entry)?,
                    a.used.get(entry).copied().unwrap_or(0),
                ))
            });
        let mut borrowed: Milli = members.clone().map(|(_, e, u)| above(u, e.nominal)).sum();
        for (name, e, used) in members {
            let idle = (e.nominal - used).clamp(0, e.lendable());
            let lent = idle.min(borrowed);
            borrowed -= lent;
            if name == queue {
                return lent;
            }
        }
        0
    }
}
