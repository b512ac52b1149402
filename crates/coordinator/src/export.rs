//! `eckpt restore` at the coordinator: where to read a rank's committed image from, and,
//! when its node is gone, decoding it onto a helper agent. A restore, not a recovery: it
//! changes no placement and no group.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Coordinator, Journal};
use eckpt_cluster_api::msg::{Deliver, ExportFrom, ExportRank, NodeInfo, Scrub};
use eckpt_cluster_api::ClusterError;

impl Coordinator {
    /// `eckpt restore`: where to read rank `rank` at `epoch` from, decoding it onto a helper
    /// agent when its node is gone. A decode that fails is retried once after scrubbing the
    /// group, with the members whose data fails its checksums as erasures too: the export
    /// is byte-exact while lost plus damaged members are at most `m`, a clear error beyond.
    /// A caller that found the copy on the rank's node damaged (`damaged_copy`) has it
    /// checked ([`Coordinator::damaged_copy`]) and, if it is, decoded as when the node is gone.
    pub(super) async fn export(
        self: &Arc<Self>,
        ExportRank {
            rank,
            epoch,
            damaged_copy,
        }: ExportRank,
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
        let mut copy_damage = None;
        if let Some(info) = alive.get(node) {
            copy_damage = match damaged_copy {
                true => self.damaged_copy(rank, epoch, info).await,
                false => None,
            };
            if copy_damage.is_none() {
                return Ok(ExportFrom {
                    node: info.clone(),
                    epoch,
                    scratch: None,
                });
            }
        }
        let why = match &copy_damage {
            Some(what) => format!("holds a damaged copy ({what})"),
            None => "is down".to_string(),
        };
        if epoch != committed {
            return Err(ClusterError::Refused(format!(
                "rank {rank}'s node {node} {why} and parity protects only epoch {committed}, not {epoch}"
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
        if let Some(what) = copy_damage {
            erasures.insert(x, format!("damaged: {what}"));
        }
        let helper = members
            .iter()
            .filter(|n| *n != node)
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

    /// `CheckCopy`: checks rank `rank`'s copy of the committed epoch on its node, which the
    /// rank found damaged as it restarted ([`Coordinator::damaged_copy`]).
    pub(super) async fn check_copy(&self, rank: u32) -> Result<Option<String>, ClusterError> {
        let (placed, epoch) = self
            .read(move |s| (s.journal().placement.get(&rank).cloned(), s.journal().committed))
            .await;
        let node = placed.ok_or_else(|| ClusterError::NotFound(format!("rank {rank} never checkpointed")))?;
        let asked = node.clone();
        let info = self.read(move |s| s.alive_node(&asked)).await.ok_or_else(|| {
            ClusterError::Refused(format!("rank {rank}'s node {node} is down: run `eckpt recover`"))
        })?;
        Ok(self.damaged_copy(rank, epoch, &info).await)
    }

    /// Checks rank `rank`'s copy of `epoch` on `node`, which a caller found damaged: what is
    /// wrong with it, or `None` when it reads back sound (the caller's failure was not the
    /// copy's). A damaged copy marks the node damaged, as a scrub of a recovery would:
    /// `status` says so, and `eckpt recover` (or `eckpt run`) rebuilds it from its group.
    async fn damaged_copy(&self, rank: u32, epoch: u64, node: &NodeInfo) -> Option<String> {
        let scrub = Scrub {
            ranks: vec![rank],
            epoch,
            objects: Vec::new(),
        };
        let what = match self.ask_all(vec![(node.clone(), scrub)]).await.pop()? {
            Ok(damage) if damage.is_empty() => return None,
            Ok(damage) => damage.summary(),
            Err(e) => e.to_string(),
        };
        let name = node.name.clone();
        let marked = what.clone();
        self.read(move |s| s.holds_damaged_ranks(&name, marked)).await;
        Some(what)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_cluster::{Fault, Kind, TestCluster};
    use eckpt_cluster_api::msg::{AgentRequest, Deliver, ExportFrom, ExportRank, Install};
    use eckpt_cluster_api::ErrorKind;
    use eckpt_coding::config::CodingConfig;

    /// An export of `rank` at `epoch`, asked for the first time.
    fn rank(rank: u32, epoch: Option<u64>) -> ExportRank {
        ExportRank {
            rank,
            epoch,
            damaged_copy: false,
        }
    }

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
        } = c.coord.export(rank(3, None)).await.unwrap();
        assert_eq!((from.name, epoch, scratch), (node, 1, None));
        assert!(
            (0..6).all(|i| c.agents.asked(&format!("n{i}")).is_empty()),
            "no agent was asked"
        );
        let e = c.coord.export(rank(3, Some(2))).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "epoch 2 is not committed (the committed epoch is 1)"
        );
    }

    /// A caller whose read of a rank's copy failed its checksums asks again: the coordinator
    /// checks that copy itself, and only a copy it finds damaged is decoded around, its
    /// node marked damaged for a recovery to rebuild.
    #[tokio::test]
    async fn a_copy_found_damaged_is_checked_then_decoded_from_the_group_and_its_node_marked_damaged() {
        let c = committed().await;
        let node = c.coord.snapshot().await.placement[&3].clone();
        let again = ExportRank {
            damaged_copy: true,
            ..rank(3, None)
        };
        // The copy reads back sound: the failure was not the copy's, and it is served again.
        let ExportFrom {
            node: from, scratch, ..
        } = c.coord.export(again).await.unwrap();
        assert_eq!((from.name.as_str(), scratch), (node.as_str(), None));
        assert_eq!(c.agents.asked(&node), [Kind::Scrub]);
        assert!(c.coord.status().await.nodes.iter().all(|n| n.damaged.is_none()));

        c.agents.fault(
            &node,
            Fault::Fail(Kind::Scrub, "injected: block 1 fails its checksum"),
        );
        let ExportFrom {
            node: helper,
            scratch,
            ..
        } = c.coord.export(again).await.unwrap();
        assert!(scratch.is_some(), "decoded from the group");
        assert_ne!(helper.name, node, "the damaged node does not decode it");
        let decode = c.agents.requests(&helper.name).into_iter().find_map(|r| match r {
            AgentRequest::Code(task) => task.decode,
            _ => None,
        });
        let position = c.coord.snapshot().await.group_of(&node).unwrap().1;
        assert!(
            decode.is_some_and(|d| d.unavailable == [position]),
            "the damaged copy is an erasure"
        );
        let status = c.coord.status().await;
        let marked = status.nodes.iter().find(|n| n.name == node).unwrap();
        assert!(
            marked
                .damaged
                .as_ref()
                .is_some_and(|d| d.contains("fails its checksum")),
            "{marked:?}"
        );
        assert_eq!(
            c.coord.snapshot().await.placement[&3],
            node,
            "an export moves no rank"
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
        } = c.coord.export(rank(1, None)).await.unwrap();
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
        let exported = c.coord.export(rank(1, None)).await.unwrap();
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
        let e = c.coord.export(rank(1, None)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unrecoverable, "{e}");
        assert!(
            e.to_string().contains(&lost) && e.to_string().contains("more than m=2"),
            "{e}"
        );
    }
}
