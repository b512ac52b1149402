//! `eckpt restore` at the coordinator: where to read a rank's committed image from, and,
//! when its node is gone, decoding it onto a helper agent. A restore, not a recovery: it
//! changes no placement and no group.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Coordinator, Journal};
use eckpt_cluster_api::msg::{Deliver, ExportFrom};
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
    ) -> Result<ExportFrom, ClusterError> {
        let _op = self.op.lock().await;
        let (journal, alive) = self.read(|s| (s.journal().clone(), s.alive())).await;
        let committed = journal.committed;
        let epoch = epoch.unwrap_or(committed);
        if committed == 0 {
            return Err(ClusterError::NotFound("no epoch is committed yet".into()));
        }
        // A later epoch may be written but undecided: never served as a checkpoint.
        if epoch > committed {
            return Err(ClusterError::NotFound(format!(
                "epoch {epoch} is not committed (the committed epoch is {committed})"
            )));
        }
        let node = journal
            .placement
            .get(&rank)
            .ok_or_else(|| ClusterError::NotFound(format!("rank {rank} never checkpointed")))?;
        if let Some(info) = alive.get(node) {
            return Ok(ExportFrom {
                node: info.clone(),
                epoch,
                scratch: None,
            });
        }
        if epoch != committed {
            return Err(ClusterError::Refused(format!(
                "rank {rank}'s node {node} is down and parity protects only epoch {committed}, not {epoch}"
            )));
        }
        let (gi, x) = journal
            .group_of(node)
            .ok_or_else(|| ClusterError::Internal(format!("node {node} is in no group")))?;
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
            .ok_or_else(|| ClusterError::Refused("no agent is alive".into()))?;
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
        Ok(ExportFrom {
            node: helper,
            epoch,
            scratch: Some(task),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_cluster::{Fault, Kind, TestCluster};
    use eckpt_cluster_api::msg::{AgentRequest, Deliver, ExportFrom, Install};
    use eckpt_cluster_api::ErrorKind;
    use eckpt_coding::config::CodingConfig;

    /// Six nodes in one group (k=4 m=2), 8 ranks committed at epoch 1.
    async fn committed() -> TestCluster {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        assert!(c.checkpoint(8).await.committed);
        c.agents.clear();
        c
    }

    #[tokio::test]
    async fn a_rank_on_an_alive_node_is_read_from_it_with_nothing_decoded() {
        let c = committed().await;
        let node = c.coord.snapshot().await.placement[&3].clone();
        let ExportFrom {
            node: from,
            epoch,
            scratch,
        } = c.coord.export(3, None).await.unwrap();
        assert_eq!((from.name, epoch, scratch), (node, 1, None));
        assert!(
            (0..6).all(|i| c.agents.asked(&format!("n{i}")).is_empty()),
            "no agent was asked"
        );
        let e = c.coord.export(3, Some(2)).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "epoch 2 is not committed (the committed epoch is 1)"
        );
    }

    #[tokio::test]
    async fn a_rank_whose_node_is_down_is_decoded_onto_a_group_member_for_that_export_only() {
        let c = committed().await;
        let lost = c.coord.snapshot().await.placement[&1].clone();
        c.kill(&lost).await;
        let ExportFrom {
            node: helper,
            scratch,
            ..
        } = c.coord.export(1, None).await.unwrap();
        assert_ne!(helper.name, lost);
        assert!(
            scratch.is_some(),
            "the image is decoded into the helper's scratch"
        );
        let decoded = c.agents.requests(&helper.name);
        assert!(
            decoded.iter().any(|r| matches!(
                r,
                AgentRequest::Install(Install {
                    deliver: Deliver::Export { rank: 1 },
                    ..
                })
            )),
            "{decoded:?}"
        );
        let journal = c.coord.snapshot().await;
        assert_eq!(journal.placement[&1], lost, "an export moves no rank");
    }

    #[tokio::test]
    async fn a_decode_that_fails_is_retried_with_the_damaged_member_as_an_erasure_and_beyond_m_refused() {
        let c = committed().await;
        let lost = c.coord.snapshot().await.placement[&1].clone();
        c.kill(&lost).await;
        // n5's parity breaks the decode and fails the scrub: a second erasure, within m=2.
        c.agents.fault(
            "n5",
            Fault::Fail(Kind::Decode, "injected: parity chunk fails its checksum"),
        );
        c.agents.fault(
            "n5",
            Fault::Fail(Kind::Scrub, "injected: parity chunk fails its checksum"),
        );
        let exported = c.coord.export(1, None).await.unwrap();
        assert!(exported.scratch.is_some(), "{exported:?}");
        let n5 = c.agents.asked("n5");
        assert_eq!(
            n5.iter().filter(|k| **k == Kind::Decode).count(),
            1,
            "the retry leaves the damaged member out: {n5:?}"
        );
        assert!(n5.contains(&Kind::Scrub));
        // Three members unusable (two down, one failing) in a group of m=2: lost, said why.
        let c = committed().await;
        let journal = c.coord.snapshot().await;
        let lost = journal.placement[&1].clone();
        let other = journal.placement.values().find(|n| **n != lost).unwrap().clone();
        c.kill(&lost).await;
        c.kill(&other).await;
        c.kill("n5").await;
        let e = c.coord.export(1, None).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unrecoverable, "{e}");
        assert!(
            e.to_string().contains(&lost) && e.to_string().contains("more than m=2"),
            "{e}"
        );
    }
}
