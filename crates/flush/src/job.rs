//! Whose flushed epoch it is. A flush directory on shared storage outlives clusters, and a
//! user's jobs may share one (or a batch system may give a new job an old job's id): a
//! restart must never hand one job another's memory. So every flushed epoch names its job
//! (format version 2), and a cluster restores — and flushes beside — only epochs of its own
//! job, or of the one job it was told to continue (`--restore-from-job`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::manifest::Manifest;

/// How `--restore-from-job` and messages name the job of a flushed epoch that records no job
/// id: written by ranks started outside `eckpt run`, or by an eckpt before format version 2
/// (which recorded no job at all).
pub const NO_JOB: &str = "-";

/// Longest job id or command line recorded.
pub(crate) const MAX_JOB_TEXT: usize = 64 * 1024;

/// The job a flushed epoch belongs to, and what ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlushedJob {
    /// The job's id (`eckpt run --job`, or the batch system's); `None`: its ranks were
    /// started outside `eckpt run`.
    pub id: Option<String>,
    /// The program and its arguments, as `eckpt run` ran them (`None`: not known — ranks
    /// started by hand, or flushed by `eckpt flush` after the run ended).
    pub command: Option<String>,
    /// Member nodes of the cluster that flushed it (spares not counted).
    pub nodes: u32,
    /// Data members per group the cluster was made with (groups formed over fewer nodes,
    /// after losses, may have fewer).
    pub k: u32,
    /// Parity members per group.
    pub m: u32,
}

impl FlushedJob {
    /// Why the record cannot be one eckpt wrote, if it cannot.
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        if self
            .id
            .as_ref()
            .is_some_and(|id| id.is_empty() || id.len() > MAX_JOB_TEXT)
        {
            return Err("the job id is empty or too long".into());
        }
        if self.command.as_ref().is_some_and(|c| c.len() > MAX_JOB_TEXT) {
            return Err("the job's command is too long".into());
        }
        Ok(())
    }
}

/// Which flushed epochs a cluster may restore: those of its job, and those of the one job it
/// was told to continue.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobFilter<'a> {
    /// The cluster's job; `None`: no job yet (a new cluster `eckpt up` made, before any
    /// `eckpt run`), which takes the job of whatever it restores.
    pub job: Option<&'a str>,
    /// `--restore-from-job`: another job whose flushed state this cluster's job continues
    /// ([`NO_JOB`]: an epoch that records no job id).
    pub restore_from: Option<&'a str>,
}

impl Manifest {
    /// The id of the epoch's job, or [`NO_JOB`].
    pub fn job_name(&self) -> &str {
        self.job.as_ref().and_then(|j| j.id.as_deref()).unwrap_or(NO_JOB)
    }

    /// The epoch's job in words, for refusals: its id, command, ranks and cluster.
    pub fn describe_job(&self) -> String {
        let Some(job) = &self.job else {
            return "of a job eckpt did not record (format version 1)".into();
        };
        let who = match &job.id {
            Some(id) => format!("job {id}'s"),
            None => "of ranks started outside `eckpt run`".into(),
        };
        format!(
            "{who} ({}{} rank{}, k={} m={} on {} nodes)",
            job.command
                .as_ref()
                .map(|c| format!("`{}`, ", shorten(c)))
                .unwrap_or_default(),
            self.world,
            if self.world == 1 { "" } else { "s" },
            job.k,
            job.m,
            job.nodes
        )
    }
}

/// A command line cut for a one-line message.
fn shorten(command: &str) -> String {
    const KEPT: usize = 60;
    match command.char_indices().nth(KEPT) {
        Some((at, _)) => format!("{}…", &command[..at]),
        None => command.to_string(),
    }
}

impl JobFilter<'_> {
    /// Whether `manifest`'s epoch (in flush directory `dir`) may be restored as this
    /// cluster's job; if not, why, in one line naming both jobs and what to say instead.
    pub fn admits(&self, manifest: &Manifest, dir: &Path) -> std::result::Result<(), String> {
        let name = manifest.job_name();
        if self.restore_from == Some(name) {
            return Ok(());
        }
        let epoch = manifest.epoch;
        let at = dir.display();
        if manifest.job.is_none() {
            return Err(format!(
                "flushed epoch {epoch} in {at} records no job (an older eckpt wrote it): `--restore-from-job {NO_JOB}` restores it{}",
                self.job.map(|j| format!(" as job {j}")).unwrap_or_default()
            ));
        }
        match self.job {
            None => Ok(()),
            Some(job) if job == name => Ok(()),
            Some(job) => Err(format!(
                "flushed epoch {epoch} in {at} is {}, not job {job}'s: {}`--restore-from-job {name}` starts job {job} from it, or give job {job} a flush directory of its own",
                manifest.describe_job(),
                if name == NO_JOB {
                    String::new()
                } else {
                    format!("`--job {name}` resumes that job, ")
                }
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::RankEntry;

    fn manifest(job: Option<FlushedJob>) -> Manifest {
        let ranks = vec![RankEntry {
            rank: 0,
            items: Vec::new(),
        }];
        let mut m = Manifest::new(5, 1, 16, job.clone().unwrap_or_else(|| named(None)), ranks).unwrap();
        if job.is_none() {
            // What format version 1 wrote: no job.
            m.job = None;
            m.version = 1;
        }
        m
    }

    fn named(id: Option<&str>) -> FlushedJob {
        FlushedJob {
            id: id.map(str::to_string),
            command: Some("./app --steps 100".into()),
            nodes: 3,
            k: 2,
            m: 1,
        }
    }

    fn filter<'a>(job: Option<&'a str>, restore_from: Option<&'a str>) -> JobFilter<'a> {
        JobFilter { job, restore_from }
    }

    #[test]
    fn a_job_restores_its_own_epochs_and_another_jobs_only_when_told() {
        let a = manifest(Some(named(Some("jobA"))));
        let dir = Path::new("/f");
        assert!(filter(Some("jobA"), None).admits(&a, dir).is_ok());
        let e = filter(Some("jobB"), None).admits(&a, dir).unwrap_err();
        assert!(
            e.contains("flushed epoch 5 in /f is job jobA's (`./app --steps 100`, 1 rank, k=2 m=1 on 3 nodes), not job jobB's")
                && e.contains("`--job jobA` resumes that job, `--restore-from-job jobA` starts job jobB from it"),
            "{e}"
        );
        assert!(filter(Some("jobB"), Some("jobA")).admits(&a, dir).is_ok());
        assert!(filter(Some("jobB"), Some("jobC")).admits(&a, dir).is_err());
        // A cluster without a job yet takes the flushed job's.
        assert!(filter(None, None).admits(&a, dir).is_ok());
    }

    #[test]
    fn epochs_without_a_job_id_are_restored_by_a_job_only_when_told() {
        let unnamed = manifest(Some(named(None)));
        let dir = Path::new("/f");
        assert!(filter(None, None).admits(&unnamed, dir).is_ok());
        let e = filter(Some("jobB"), None).admits(&unnamed, dir).unwrap_err();
        assert!(
            e.contains("of ranks started outside `eckpt run`") && !e.contains("--job -"),
            "{e}"
        );
        assert!(filter(Some("jobB"), Some(NO_JOB)).admits(&unnamed, dir).is_ok());
    }

    #[test]
    fn version_1_epochs_record_no_job_and_are_restored_only_when_told() {
        let old = manifest(None);
        let dir = Path::new("/f");
        for job in [None, Some("jobA")] {
            let e = filter(job, None).admits(&old, dir).unwrap_err();
            assert!(
                e.contains("records no job") && e.contains("`--restore-from-job -`"),
                "{e}"
            );
            assert!(filter(job, Some(NO_JOB)).admits(&old, dir).is_ok());
        }
    }

    #[test]
    fn long_commands_are_cut_in_messages() {
        let mut job = named(Some("j"));
        job.command = Some("x".repeat(500));
        let d = manifest(Some(job)).describe_job();
        assert!(d.len() < 200 && d.contains('…'), "{d}");
    }
}
