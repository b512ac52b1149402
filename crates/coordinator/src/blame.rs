//! Saying which node broke a task spread over many. When one member of a pipeline fails,
//! every member downstream and upstream fails too ("stream ended early", "Broken pipe"),
//! and the first answer the coordinator reads is rarely the cause: a parity holder whose
//! disk is full, or an agent that stopped (SIGSTOP, a hung host) and so never fails at all.
//! A failed task therefore blames a member whose heartbeats stopped, else the failure that
//! is not a link symptom.

use std::time::Duration;

use super::Coordinator;
use eckpt_cluster_api::call::ToAgent;
use eckpt_cluster_api::msg::{CancelTask, NodeInfo};
use eckpt_cluster_api::ClusterError;

/// How often a running task's participants are checked for a lost agent.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(200);

/// The failure to report among a task's results: the first that is not a link symptom
/// (a full disk, a checksum, a refusal), else the first; `Ok` with every answer when none
/// failed.
pub(super) fn root_cause<T>(results: Vec<Result<T, ClusterError>>) -> Result<Vec<T>, ClusterError> {
    let mut answers = Vec::with_capacity(results.len());
    let mut symptom = None;
    for r in results {
        match r {
            Ok(a) => answers.push(a),
            Err(e) if e.is_link_symptom() => {
                symptom.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match symptom {
        Some(e) => Err(e),
        None => Ok(answers),
    }
}

impl Coordinator {
    /// Sends task `task`'s requests and waits for every answer. The parts of a task need
    /// each other (each streams to or from the others, and a flush or an import is
    /// published whole or not at all), so the first participant that fails its part, or is
    /// no longer alive while the task runs — its agent gone, or silent for the liveness
    /// period (a hung host never fails by itself) — gets the task cancelled at the others:
    /// a coding part then ends at once instead of waiting out the peer deadline for a
    /// stream that will never come (a flush or an import, which cannot be cancelled, ends
    /// when its copy does). Their answers are awaited, so that no participant outlives the
    /// decision; each is bounded by its participant's liveness, and after a loss all of
    /// them by two liveness periods. If any failed, fails with the node that broke it: a
    /// member that is gone or stopped heartbeating, else the first failure, unless another
    /// is not a link symptom. Answers in request order.
    pub(super) async fn run_task<C: ToAgent>(
        &self,
        task: u64,
        requests: Vec<(NodeInfo, C)>,
    ) -> Result<Vec<C::Answer>, ClusterError> {
        let nodes: Vec<NodeInfo> = requests.iter().map(|(n, _)| n.clone()).collect();
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let (failed, mut first_failure) = tokio::sync::mpsc::unbounded_channel();
        let answers = self.ask_each(requests, move |node, answer| {
            if let Err(e) = answer {
                let _ = failed.send((node.to_string(), e.to_string()));
            }
        });
        tokio::pin!(answers);
        let gone = async {
            loop {
                let absent = self.absent(names.clone()).await;
                if let Some(n) = names.iter().find(|n| absent.contains_key(*n)) {
                    return n.clone();
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
        };
        let (stopped_by, reason, lost) = tokio::select! {
            results = &mut answers => return self.blame(&nodes, results, None).await,
            node = gone => {
                let reason = format!("participant {node} is down");
                (node, reason, true)
            }
            Some((node, error)) = first_failure.recv() => {
                let reason = format!("participant {node} failed: {error}");
                (node, reason, false)
            }
        };
        let cancels = nodes
            .iter()
            .filter(|n| n.name != stopped_by)
            .map(|n| {
                (
                    n.clone(),
                    CancelTask {
                        task,
                        reason: reason.clone(),
                    },
                )
            })
            .collect();
        self.ask_all(cancels).await;
        if !lost {
            let results = answers.await;
            return self.blame(&nodes, results, Some(&stopped_by)).await;
        }
        match tokio::time::timeout(2 * self.deadlines.liveness(), answers).await {
            Ok(results) => self.blame(&nodes, results, None).await,
            Err(_) => {
                let names = nodes.iter().map(|n| n.name.clone()).collect();
                let absent = self.absent(names).await.pop_first();
                let (node, reason) = absent.unwrap_or((stopped_by, reason));
                Err(ClusterError::Node { node, reason })
            }
        }
    }

    /// A task's outcome from its answers: every answer, or the failure of the node that
    /// broke it — one not alive, else `first_failed`'s (the others' are the echoes of its
    /// cancellation) unless another is not a link symptom.
    async fn blame<T>(
        &self,
        nodes: &[NodeInfo],
        mut results: Vec<Result<T, ClusterError>>,
        first_failed: Option<&str>,
    ) -> Result<Vec<T>, ClusterError> {
        if results.iter().any(Result::is_err) {
            let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
            let absent = self.absent(names.clone()).await;
            if let Some((node, reason)) = names.iter().find_map(|n| Some((n, absent.get(n)?))) {
                return Err(ClusterError::Node {
                    node: node.clone(),
                    reason: reason.clone(),
                });
            }
        }
        if let Some(at) = first_failed.and_then(|node| nodes.iter().position(|n| n.name == node)) {
            results[..=at].rotate_right(1);
        }
        root_cause(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_cluster_api::{ErrorKind, WireError};

    fn node(name: &str, kind: ErrorKind, message: &str) -> Result<(), ClusterError> {
        Err(ClusterError::remote(
            name,
            WireError {
                kind,
                message: message.into(),
            },
        ))
    }

    #[test]
    fn the_cause_is_preferred_over_the_broken_links_it_left() {
        let results = vec![
            node("n0", ErrorKind::Link, "node n1: Broken pipe (os error 32)"),
            Ok(()),
            node("n3", ErrorKind::Link, "node n4: stream ended early"),
            node(
                "n4",
                ErrorKind::Io,
                "/d/nodes/n4/coded/prepared-1.2/p0: No space left on device (os error 28)",
            ),
        ];
        let e = root_cause(results).unwrap_err();
        assert!(
            e.to_string().starts_with("node n4: ") && e.to_string().contains("No space left"),
            "{e}"
        );
    }

    #[test]
    fn only_symptoms_report_the_first_and_no_failure_gives_every_answer() {
        let e = root_cause(vec![
            node("n0", ErrorKind::Link, "stream ended early"),
            node("n1", ErrorKind::Link, "Broken pipe"),
        ])
        .unwrap_err();
        assert!(e.to_string().starts_with("node n0"), "{e}");
        assert_eq!(
            root_cause(vec![Ok::<_, ClusterError>(1), Ok(2)]).unwrap(),
            vec![1, 2]
        );
    }
}
