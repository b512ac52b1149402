//! `eckpt restore` at the coordinator: where to read a rank's committed image from, and,
//! when its node is gone, decoding it onto a helper agent. A restore, not a recovery: it
//! changes no placement and no group.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Coordinator, Journal};
use eckpt_cluster_api::msg::{CoordResponse, Deliver};
use eckpt_cluster_api::ClusterError;

impl Coordinator {
    /// `eckpt restore`: where to read rank `rank` at `epoch` from, decoding it onto a helper
    /// agent when its node is gone. A decode that fails is retried once after scrubbing the
    /// group, with the members whose data fails its checksums as erasures too: the export
    /// is byte-exact while lost plus damaged members are at most `m`, a clear error beyond.
    pub(super) async fn export(
        self: &Arc<Self>,
        rank: u32,
        epoch: Option<u64>,
    ) -> Result<CoordResponse, ClusterError> {
        let _op = self.op.lock().await;
        let (journal, alive) = self.read(|s| (s.journal().clone(), s.alive())).await;
        let committed = journal.committed;
        let epoch = epoch.unwrap_or(committed);
        if committed == 0 {
            return Err(ClusterError::Invalid("no epoch is committed yet".into()));
        }
        let node = journal
            .placement
            .get(&rank)
            .ok_or_else(|| ClusterError::Invalid(format!("rank {rank} never checkpointed")))?;
        if let Some(info) = alive.get(node) {
            return Ok(CoordResponse::ExportFrom {
                node: info.clone(),
                epoch,
                scratch: None,
            });
        }
        if epoch != committed {
            return Err(ClusterError::Invalid(format!(
                "rank {rank}'s node {node} is down and parity protects only epoch {committed}, not {epoch}"
            )));
        }
        let (gi, x) = journal
            .group_of(node)
            .ok_or_else(|| ClusterError::Invalid(format!("node {node} is in no group")))?;
        let rec = &journal.groups[gi];
        let members = &rec.group.members;
        // Erasures: the members that are down and, once a decode failed, those whose data
        // fails its checksums (a corrupt parity chunk breaks a decode like a lost member).
        let mut erasures: BTreeMap<usize, String> = (0..members.len())
            .filter(|&p| !alive.contains_key(&members[p]))
            .map(|p| (p, "down".to_string()))
            .collect();
        let helper = members
            .iter()
            .find_map(|n| alive.get(n))
            .or_else(|| alive.values().next())
            .cloned()
            .ok_or_else(|| ClusterError::Invalid("no agent is alive".into()))?;
        let mut scrubbed = false;
        let task = loop {
            if erasures.len() > rec.group.m || rec.objects.is_empty() {
                let why: Vec<String> = erasures
                    .iter()
                    .map(|(&p, what)| format!("{} {what}", members[p]))
                    .collect();
                return Err(ClusterError::Unrecoverable(format!(
                    "rank {rank} at epoch {epoch} is lost: group {} has {} of {} members unusable ({}), more than m={}",
                    rec.group.id,
                    erasures.len(),
                    members.len(),
                    why.join("; "),
                    rec.group.m
                )));
            }
            let unavailable: Vec<usize> = erasures.keys().copied().collect();
            let rebuild = [(x, helper.clone(), Deliver::Export { rank })];
            match self
                .decode_members(
                    rec,
                    &unavailable,
                    &rebuild,
                    &alive,
                    epoch,
                    &mut Default::default(),
                )
                .await
            {
                Ok(task) => break task,
                Err(e) if scrubbed => return Err(e),
                Err(e) => {
                    scrubbed = true;
                    let group = Journal {
                        groups: vec![rec.clone()],
                        ..journal.clone()
                    };
                    let damaged = self.scrub(&group, &alive).await;
                    if damaged.is_empty() {
                        return Err(e);
                    }
                    for (p, name) in members.iter().enumerate() {
                        if let Some(what) = damaged.get(name) {
                            erasures.insert(p, format!("damaged: {what}"));
                        }
                    }
                }
            }
        };
        Ok(CoordResponse::ExportFrom {
            node: helper,
            epoch,
            scratch: Some(task),
        })
    }
}
