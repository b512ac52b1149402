//! The Slurm allocation `eckpt run --launcher srun` runs in: its job id, the nodes it holds
//! now, which of them Slurm considers gone, and how to end a job step. Everything is asked
//! of Slurm's own commands (`scontrol`, `sinfo`, `squeue`, `scancel`), each bounded by
//! [`COMMAND_WAIT`]: a controller that does not answer must not hang the supervisor.
//!
//! Slurm learns of a dead node late (its `SlurmdTimeout`, tens of seconds) while eckpt's
//! heartbeats notice within a liveness period; but only Slurm knows that a node whose agent
//! still answers was taken out of the job (drained, its slurmd gone), where no step can be
//! started any more. The supervisor uses both views.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::RunError;

/// How long one Slurm command may take.
pub const COMMAND_WAIT: Duration = Duration::from_secs(30);

/// Input variables of srun that the batch script's own `sbatch` options set and that would
/// override the layout eckpt gives each step.
const LAYOUT_VARIABLES: [&str; 4] = [
    "SLURM_NTASKS_PER_NODE",
    "SLURM_DISTRIBUTION",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
];

/// An srun for a step of eckpt's (the agents, an attempt, an MPI launcher's daemon): it
/// shares the allocation's CPUs with eckpt's other steps (`--overlap`), may wait at most
/// [`COMMAND_WAIT`] to start (a step that cannot be placed waits forever otherwise), and
/// takes its layout from its own options only.
pub fn step() -> Command {
    let mut command = Command::new("srun");
    clear_layout(&mut command);
    command.args(step_options());
    command
}

/// The options every srun of eckpt's takes ([`step`]), for an srun another program starts.
pub fn step_options() -> [String; 2] {
    [
        "--overlap".into(),
        format!("--immediate={}", COMMAND_WAIT.as_secs()),
    ]
}

/// Keeps the batch script's layout variables from `command` and the sruns it starts.
pub fn clear_layout(command: &mut Command) {
    for variable in LAYOUT_VARIABLES {
        command.env_remove(variable);
    }
}

/// The allocation this process runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job: String,
}

impl Allocation {
    /// The allocation of this process (`SLURM_JOB_ID`), or why there is none.
    pub fn current() -> Result<Allocation, RunError> {
        match std::env::var("SLURM_JOB_ID") {
            Ok(job) if !job.is_empty() => Ok(Allocation { job }),
            _ => Err(RunError::Launch(
                "--launcher srun runs inside a Slurm allocation (sbatch or salloc): SLURM_JOB_ID is not set"
                    .into(),
            )),
        }
    }

    /// The nodes the job holds now, in Slurm's order. Slurm removes a failed node from a
    /// `--no-kill` job (the `SLURM_JOB_NODELIST` variable is not updated, so it is asked).
    pub fn nodes(&self) -> Result<Vec<String>, RunError> {
        let job = slurm(&["scontrol", "show", "job", "--oneliner", &self.job])?;
        let list = node_list(&job).ok_or_else(|| {
            RunError::Launch(format!("scontrol show job {}: no NodeList in {job:?}", self.job))
        })?;
        hostnames(list)
    }

    /// The most ranks each node of the allocation may run: the job's tasks there
    /// (`SLURM_TASKS_PER_NODE` over `SLURM_JOB_NODELIST`, as Open MPI and MPICH count an
    /// allocation's slots; `SLURM_JOB_CPUS_PER_NODE` where the first is not set). A node
    /// Slurm later takes out of the job keeps its entry, unused; the others' counts do not
    /// change. Empty (no limit) when Slurm did not say.
    pub fn slots(&self) -> Result<BTreeMap<String, u32>, RunError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let (Some(list), Some((source, counts))) = (
            var("SLURM_JOB_NODELIST").or_else(|| var("SLURM_NODELIST")),
            ["SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"]
                .into_iter()
                .find_map(|name| Some((name, var(name)?))),
        ) else {
            return Ok(BTreeMap::new());
        };
        let nodes = hostnames(&list)?;
        match per_node_counts(&counts) {
            Some(counts) if counts.len() == nodes.len() => Ok(nodes.into_iter().zip(counts).collect()),
            _ => {
                tracing::warn!(
                    "{source}={counts:?} does not give a count for each node of {list}: no limit on ranks per node"
                );
                Ok(BTreeMap::new())
            }
        }
    }

    /// Those of `nodes` Slurm reports down, drained, failed or not responding.
    pub fn unavailable(&self, nodes: &[String]) -> Result<BTreeSet<String>, RunError> {
        if nodes.is_empty() {
            return Ok(BTreeSet::new());
        }
        let list = nodes.join(",");
        let out = slurm(&[
            "sinfo",
            "--noheader",
            "--Node",
            "--nodes",
            &list,
            "--states",
            "down,drain,fail,no_respond",
            "--format",
            "%N",
        ])?;
        Ok(out.split_whitespace().map(str::to_string).collect())
    }

    /// The id (`JOB.STEP`) of this job's step named `name`, if it runs.
    pub fn step_named(&self, name: &str) -> Result<Option<String>, RunError> {
        let out = slurm(&[
            "squeue",
            "--noheader",
            "--steps",
            "--jobs",
            &self.job,
            "--format",
            "%i %j",
        ])?;
        Ok(step_of(&out, name))
    }

    /// Cancels step `step` (`JOB.STEP`): Slurm kills its tasks on every node.
    pub fn cancel_step(&self, step: &str) -> Result<(), RunError> {
        slurm(&["scancel", "--quiet", step]).map(|_| ())
    }
}

/// `NodeList=` of `scontrol show job --oneliner`'s line.
fn node_list(job: &str) -> Option<&str> {
    job.split_whitespace()
        .find_map(|field| field.strip_prefix("NodeList="))
        .filter(|list| !list.is_empty() && *list != "(null)")
}

/// Slurm's per-node counts (`SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`: `8(x3),7`,
/// a count repeated `(xN)` times) one per node.
fn per_node_counts(text: &str) -> Option<Vec<u32>> {
    let mut counts = Vec::new();
    for item in text.trim().split(',') {
        let (count, times) = match item.split_once("(x") {
            Some((count, times)) => (count, times.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (item, 1),
        };
        counts.extend(std::iter::repeat_n(count.trim().parse::<u32>().ok()?, times));
    }
    Some(counts)
}

/// The step of `squeue --steps --format "%i %j"` output named `name`.
fn step_of(squeue: &str, name: &str) -> Option<String> {
    squeue.lines().find_map(|line| {
        let (id, step_name) = line.trim().split_once(' ')?;
        (step_name.trim() == name).then(|| id.to_string())
    })
}

/// Each node's leaf switch, where Slurm knows the network's topology
/// (`TopologyPlugin=topology/tree`): the nodes behind one switch fail together when it
/// does, so each leaf switch is a failure domain (groups are formed across them). Empty
/// when Slurm has no topology (`scontrol show topology` then fails or lists nothing).
pub fn leaf_switches() -> BTreeMap<String, String> {
    let Ok(topology) = slurm(&["scontrol", "show", "topology"]) else {
        return BTreeMap::new();
    };
    let mut domains = BTreeMap::new();
    for (switch, list) in leaves(&topology) {
        match hostnames(list) {
            Ok(nodes) => domains.extend(nodes.into_iter().map(|n| (n, switch.to_string()))),
            Err(e) => tracing::warn!(error = %e, switch, "the nodes of a switch could not be listed"),
        }
    }
    domains
}

/// The leaf switches (`Level=0`) of `scontrol show topology` output, with their node lists.
fn leaves(topology: &str) -> Vec<(&str, &str)> {
    topology
        .lines()
        .filter_map(|line| {
            let field = |key: &str| line.split_whitespace().find_map(|f| f.strip_prefix(key));
            (field("Level=")? == "0").then_some(())?;
            Some((field("SwitchName=")?, field("Nodes=")?))
        })
        .collect()
}

/// A Slurm host list (`node[1-2,4]`) expanded by Slurm itself.
pub fn hostnames(list: &str) -> Result<Vec<String>, RunError> {
    let out = slurm(&["scontrol", "show", "hostnames", list])?;
    Ok(out.split_whitespace().map(str::to_string).collect())
}

/// Runs a Slurm command (at most [`COMMAND_WAIT`]) and returns its stdout; a failure, with
/// what the command said, is an error.
fn slurm(args: &[&str]) -> Result<String, RunError> {
    let what = args.join(" ");
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Launch(format!("{what}: {e} (is Slurm installed here?)")))?;
    let deadline = Instant::now() + COMMAND_WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Launch(format!(
                    "{what}: no answer within {} s (is slurmctld reachable?)",
                    COMMAND_WAIT.as_secs()
                )));
            }
            Err(e) => return Err(RunError::Launch(format!("{what}: {e}"))),
        }
    };
    // The outputs are small (a job's line, a node list): the pipes do not fill up before exit.
    let read = |pipe: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    };
    let out = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
    let err = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
    if !status.success() {
        return Err(RunError::Launch(format!("{what}: {}", err.trim())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_list_is_read_from_the_job_line() {
        let line = "JobId=7 JobName=job UserId=root(0) JobState=RUNNING NodeList=node[1-2,4] BatchHost=node1 NumNodes=3";
        assert_eq!(node_list(line), Some("node[1-2,4]"));
        assert_eq!(node_list("JobId=7 NodeList=(null) ReqNodeList=(null)"), None);
        assert_eq!(node_list("JobId=7 ReqNodeList=node1"), None);
    }

    #[test]
    fn leaf_switches_are_read_from_the_topology() {
        let out = "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]\n\
                   SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[3-4]\n\
                   SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-4] Switches=leaf[1-2]\n";
        assert_eq!(leaves(out), [("leaf1", "node[1-2]"), ("leaf2", "node[3-4]")]);
        assert!(leaves("No topology information available\n").is_empty());
        assert!(
            leaves("SwitchName=s0 Level=0 LinkSpeed=1\n").is_empty(),
            "a switch without nodes"
        );
    }

    #[test]
    fn slurms_per_node_counts_are_expanded() {
        assert_eq!(per_node_counts("8(x9)"), Some(vec![8; 9]));
        assert_eq!(per_node_counts("3(x2),2,1(x1)"), Some(vec![3, 3, 2, 1]));
        assert_eq!(per_node_counts("4"), Some(vec![4]));
        assert_eq!(per_node_counts("2(x"), None);
        assert_eq!(per_node_counts("two"), None);
        assert_eq!(per_node_counts(""), None);
    }

    #[test]
    fn a_step_is_found_by_its_name() {
        let out = "  12.0 eckpt-agents-ab12\n  12.1 ab12-1\n  12.2 ab12-2\n";
        assert_eq!(step_of(out, "ab12-2").as_deref(), Some("12.2"));
        assert_eq!(step_of(out, "ab12"), None);
        assert_eq!(step_of("", "x"), None);
    }
}
