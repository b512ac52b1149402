//! The coordinator's own repair of missing parity. A node can hold less coded data than
//! the journal says while every rank is where it should be: an agent that registered again
//! in the middle of a recovery (a stall of the coordinator makes every agent do so) resolved
//! its store against the journal of that moment and dropped the parity it had just
//! prepared. Nothing else would notice before the next loss found the group a member short
//! — `eckpt run` asks for a recovery only when a node is lost — so the coordinator encodes
//! such groups again by itself: a recovery that rebuilds and moves no rank
//! ([`Scope::Parity`]), started when a node registers missing nothing but coded objects, or
//! when a recovery's check finds a holder without the parity it committed. Lost nodes and
//! missing rank data are left to `eckpt recover` and the job's supervisor: rebuilding them
//! moves ranks, which only the supervisor may stop and relaunch.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use super::recovery::{Progress, Scope};
use super::Coordinator;
use eckpt_cluster_api::msg::Relocation;

/// A repair's steps: nobody is listening (its outcome is logged).
struct Unheard;

impl Progress for Unheard {
    async fn step(&mut self, _: &str, _: u64, _: u64) {}
}

impl Coordinator {
    /// Queues a repair of missing parity, unless one is waiting for its turn already.
    pub(super) fn repair_soon(self: &Arc<Self>) {
        if self.repair_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let coord = self.clone();
        tokio::spawn(async move { coord.repair().await });
    }

    /// Encodes again the groups whose parity a node lacks, once every member is alive and
    /// no node is awaited (a gap found during a storm of registrations is repaired once
    /// the storm is over), waiting for that at most an agent's longest reconnection: a
    /// member still down then is lost, and recovering it — what `eckpt recover` does —
    /// repairs the gap too.
    async fn repair(self: Arc<Self>) {
        let patience = Instant::now() + self.deadlines.reconnection();
        loop {
            let (gaps, settled) = self
                .read(|s| {
                    let alive = s.alive();
                    let settled =
                        s.awaited().is_empty() && s.journal().members().iter().all(|m| alive.contains_key(m));
                    (s.parity_gaps_only(), settled)
                })
                .await;
            if !gaps {
                self.repair_queued.store(false, Ordering::Release);
                return;
            }
            if settled {
                break;
            }
            if Instant::now() >= patience {
                self.repair_queued.store(false, Ordering::Release);
                tracing::warn!("parity is missing but a member is down: left for `eckpt recover`");
                return;
            }
            tokio::time::sleep(self.deadlines.heartbeat()).await;
        }
        let _op = self.op.lock().await;
        // A gap found from here on queues the next repair.
        self.repair_queued.store(false, Ordering::Release);
        tracing::info!("repairing missing parity");
        match self
            .recover_held(&mut Unheard, Relocation::Process, Scope::Parity)
            .await
        {
            Ok(report) => tracing::info!(
                groups = ?report.reencoded,
                repaired = ?report.repaired,
                warnings = ?report.warnings,
                "missing parity repaired"
            ),
            Err(e) => tracing::warn!(error = %e, "missing parity not repaired"),
        }
    }
}
