//! The pace of `snapshot()`. Ranks that checkpoint by interval report how long they compute
//! per call and how long checkpoints block them; the coordinator turns the reports of one
//! decision point into one [`PaceStats`] — the slowest rank's figures — so every rank
//! derives the same next checkpoint from the same numbers and no rank waits for an epoch
//! the others skip.
//!
//! Two kinds of decision points carry reports: a checkpoint (the reports arrive with
//! `RankReady`, and the figures are handed out with the next epoch's `OpenEpoch`), and a
//! pace point without a checkpoint (`Pace`: a barrier of every rank, used when no figures
//! are known yet — a fresh launch, or after an epoch aborted before every rank was in).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::Coordinator;
use eckpt_cluster_api::msg::{PaceReport, PaceStats};
use eckpt_cluster_api::ClusterError;

/// The job's pace from every rank's report of one decision point: the slowest rank's time
/// per call and the longest checkpoint. Refused when the ranks disagree on the interval
/// policy (they would decide differently) or a report is malformed.
pub fn aggregate<'a>(
    reports: impl IntoIterator<Item = (u32, &'a PaceReport)>,
) -> Result<PaceStats, ClusterError> {
    let mut policy: Option<(u32, &str)> = None;
    let mut step_seconds: f64 = 0.0;
    let mut checkpoint_seconds: Option<f64> = None;
    for (rank, report) in reports {
        check_policy(&mut policy, rank, report)?;
        if report.calls == 0 || !report.seconds.is_finite() || report.seconds < 0.0 {
            return Err(ClusterError::Protocol(format!(
                "rank {rank}: a pace report needs calls > 0 and seconds ≥ 0 (got {} calls, {} s)",
                report.calls, report.seconds
            )));
        }
        step_seconds = step_seconds.max(report.seconds / report.calls as f64);
        if let Some(c) = report.checkpoint_seconds.filter(|c| c.is_finite() && *c >= 0.0) {
            checkpoint_seconds = Some(checkpoint_seconds.map_or(c, |m: f64| m.max(c)));
        }
    }
    if policy.is_none() {
        return Err(ClusterError::Internal("no pace reports".into()));
    }
    Ok(PaceStats {
        step_seconds,
        checkpoint_seconds,
    })
}

/// Remembers the first rank's policy; an error naming both when `report`'s differs.
pub fn check_policy<'a>(
    first: &mut Option<(u32, &'a str)>,
    rank: u32,
    report: &'a PaceReport,
) -> Result<(), ClusterError> {
    match first {
        None => {
            *first = Some((rank, &report.policy));
            Ok(())
        }
        Some((_, p)) if *p == report.policy => Ok(()),
        Some((other, p)) => Err(ClusterError::Mismatch(format!(
            "rank {rank} checkpoints with interval {:?} but rank {other} with {p:?}: every rank of a job needs the same interval",
            report.policy
        ))),
    }
}

/// One pace point of one launch: the reports so far, and once every rank is in, the answer.
struct Round {
    world: u32,
    reports: BTreeMap<u32, PaceReport>,
    answer: Option<Result<PaceStats, String>>,
    /// Ranks that took the answer: the round is forgotten once all did.
    taken: BTreeSet<u32>,
}

/// `(launch, round)`: one pace point.
type PointKey = (String, u64);

/// What a rank's arrival at a pace point found.
enum Reached {
    /// The point was answered already (the rank asks again): its answer.
    Answered(PaceStats),
    /// This rank was the last one: the ranks waiting there can take the answer now.
    Completed,
    /// Ranks are still missing.
    Waiting,
}

/// How many answered pace points are remembered for ranks that ask again.
const ANSWERED_KEPT: usize = 64;

/// Pace points in progress, by launch and round, and the last answered ones.
#[derive(Default)]
pub(super) struct PacePoints {
    rounds: BTreeMap<PointKey, Round>,
    /// Answers of points every rank took: a rank asking again (a retry after a broken
    /// connection) gets the same answer instead of opening the point anew.
    answered: VecDeque<(PointKey, Result<PaceStats, String>)>,
}

impl PacePoints {
    fn answer_of(&self, key: &PointKey) -> Option<Result<PaceStats, ClusterError>> {
        self.answered
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, a)| a.clone().map_err(ClusterError::Invalid))
    }

    /// `rank` takes the answer of `key`, if there is one yet; a point every rank took is
    /// moved to the answered ones. `Err` when the point is gone unanswered (a new attempt
    /// of the job forgot it).
    fn take(&mut self, key: &PointKey, rank: u32) -> Result<Option<PaceStats>, ClusterError> {
        let Some(round) = self.rounds.get_mut(key) else {
            return match self.answer_of(key) {
                Some(answer) => answer.map(Some),
                None => Err(ClusterError::Fenced(format!(
                    "pace point {} of launch {} was abandoned: a new attempt of the job started",
                    key.1, key.0
                ))),
            };
        };
        let Some(answer) = round.answer.clone() else {
            return Ok(None);
        };
        round.taken.insert(rank);
        if round.taken.len() as u32 >= round.world {
            self.rounds.remove(key);
            self.answered.push_back((key.clone(), answer.clone()));
            while self.answered.len() > ANSWERED_KEPT {
                self.answered.pop_front();
            }
        }
        answer.map(Some).map_err(ClusterError::Invalid)
    }
}

impl Coordinator {
    /// `Pace`: records the rank's report and waits (at most the cluster's open wait) until every rank
    /// of the job reached the same pace point; the job's pace then.
    pub(super) async fn pace(
        &self,
        rank: u32,
        world: u32,
        launch: String,
        round: u64,
        report: PaceReport,
        generation: Option<u64>,
    ) -> Result<PaceStats, ClusterError> {
        self.fence(generation, format!("rank {rank}")).await?;
        self.read(move |s| {
            s.journal().check_rank(rank, world, |w| {
                format!("the job has {w} ranks; this pace point says {world}")
            })
        })
        .await?;
        let key = (launch, round);
        let reached = key.clone();
        let arrival = self
            .read(move |s| s.pace_points.reach(reached, rank, world, report))
            .await?;
        match arrival {
            Reached::Answered(answer) => return Ok(answer),
            // Only the last arrival wakes the waiting ranks: waking all of them at each
            // arrival made a pace point cost ranks² reads.
            Reached::Completed => self.changed.notify_waiters(),
            Reached::Waiting => {}
        }
        let wait = self.deadlines.open_wait();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            let point = key.clone();
            if let Some(answer) = self.read(move |s| s.pace_points.take(&point, rank)).await? {
                return Ok(answer);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let point = key.clone();
                let missing = self
                    .read(move |s| s.pace_points.give_up(&point, rank, world))
                    .await;
                return Err(ClusterError::Refused(format!(
                    "pace point {} of the launch: {missing} rank(s) never reached it within {:.0} s",
                    key.1,
                    wait.as_secs_f64()
                )));
            }
        }
    }
}

impl PacePoints {
    /// Records that `rank` reached pace point `key`.
    fn reach(
        &mut self,
        key: PointKey,
        rank: u32,
        world: u32,
        report: PaceReport,
    ) -> Result<Reached, ClusterError> {
        if let Some(answer) = self.answer_of(&key) {
            return answer.map(Reached::Answered);
        }
        let entry = self.rounds.entry(key.clone()).or_insert_with(|| Round {
            world,
            reports: BTreeMap::new(),
            answer: None,
            taken: BTreeSet::new(),
        });
        if entry.world != world {
            return Err(ClusterError::Mismatch(format!(
                "rank {rank} says the job has {world} ranks, others {}",
                entry.world
            )));
        }
        entry.reports.insert(rank, report);
        if entry.reports.len() as u32 == world && entry.answer.is_none() {
            entry.answer =
                Some(aggregate(entry.reports.iter().map(|(r, p)| (*r, p))).map_err(|e| e.to_string()));
            return Ok(Reached::Completed);
        }
        Ok(Reached::Waiting)
    }

    /// `rank` stops waiting at pace point `key`; how many ranks never reached it.
    fn give_up(&mut self, key: &PointKey, rank: u32, world: u32) -> usize {
        let Some(round) = self.rounds.get_mut(key) else {
            return 0;
        };
        let missing = world as usize - round.reports.len();
        round.reports.remove(&rank);
        missing
    }
}

impl Coordinator {
    /// Forgets every pace point in progress (a new attempt of the job: its ranks meet at
    /// points of their own launch); ranks still waiting at one are told.
    pub(super) async fn forget_pace_points(&self) {
        self.read(|s| s.pace_points.rounds.clear()).await;
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(calls: u64, seconds: f64, checkpoint: Option<f64>, policy: &str) -> PaceReport {
        PaceReport {
            calls,
            seconds,
            checkpoint_seconds: checkpoint,
            policy: policy.into(),
        }
    }

    #[test]
    fn the_slowest_rank_sets_the_pace() {
        let a = report(10, 1.0, Some(0.2), "30s");
        let b = report(10, 3.0, None, "30s");
        let c = report(5, 1.0, Some(0.5), "30s");
        let stats = aggregate([(0, &a), (1, &b), (2, &c)]).unwrap();
        assert_eq!(stats.step_seconds, 0.3);
        assert_eq!(stats.checkpoint_seconds, Some(0.5));
        // The order of the reports does not matter: every rank gets the same figures.
        assert_eq!(aggregate([(2, &c), (1, &b), (0, &a)]).unwrap(), stats);
    }

    #[test]
    fn a_rank_asking_twice_gets_the_same_answer_and_the_point_is_forgotten_once() {
        let mut points = PacePoints::default();
        let key: PointKey = ("launch".into(), 1);
        points.rounds.insert(
            key.clone(),
            Round {
                world: 2,
                reports: BTreeMap::new(),
                answer: Some(Ok(PaceStats {
                    step_seconds: 0.5,
                    checkpoint_seconds: None,
                })),
                taken: BTreeSet::new(),
            },
        );
        let first = points.take(&key, 0).unwrap().unwrap();
        assert_eq!(points.take(&key, 0).unwrap(), Some(first), "rank 0 again");
        assert!(points.rounds.contains_key(&key), "rank 1 has not taken it yet");
        assert_eq!(points.take(&key, 1).unwrap(), Some(first));
        assert!(!points.rounds.contains_key(&key));
        assert_eq!(
            points.take(&key, 0).unwrap(),
            Some(first),
            "after every rank took it"
        );
        let gone: PointKey = ("launch".into(), 2);
        assert!(points
            .take(&gone, 0)
            .unwrap_err()
            .to_string()
            .contains("abandoned"));
    }

    #[test]
    fn ranks_that_disagree_on_the_policy_or_report_nonsense_are_refused() {
        let a = report(10, 1.0, None, "30s");
        let b = report(10, 1.0, None, "auto/mtbf=3600s");
        let e = aggregate([(0, &a), (4, &b)]).unwrap_err().to_string();
        assert!(e.contains("rank 4") && e.contains("rank 0"), "{e}");
        assert!(aggregate([(0, &report(0, 1.0, None, "30s"))]).is_err());
        assert!(aggregate([(0, &report(1, f64::NAN, None, "30s"))]).is_err());
        assert!(aggregate(std::iter::empty()).is_err());
    }
}
