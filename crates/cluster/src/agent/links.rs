//! [`Links`] over authenticated connections: one writer task per peer the participant sends
//! to and one reader task per peer it receives from, joined to the (blocking) executor by
//! bounded channels — transfer overlaps compute, and a slow link pushes back.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use eckpt_proto::ClusterSecret;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use eckpt_cluster_api::msg::{Hello, NodeInfo};
use eckpt_cluster_api::net::{node_error, open, Inbox};
use eckpt_cluster_api::ClusterError;
use eckpt_coding::exec::Links;

/// Messages in flight per link in each direction (double buffering and a little more).
const DEPTH: usize = 3;

/// What broke a link, for the error the executor reports.
type Failure = Arc<Mutex<Option<String>>>;

/// The links of one participant of one task.
pub struct TaskLinks {
    out: HashMap<usize, (mpsc::Sender<Vec<u8>>, Failure)>,
    inp: HashMap<usize, (mpsc::Receiver<Vec<u8>>, Failure)>,
    names: HashMap<usize, String>,
    writers: Vec<(String, JoinHandle<Result<(), ClusterError>>)>,
    readers: Vec<JoinHandle<()>>,
}

fn failure_of(f: &Failure, name: &str, what: &str) -> ClusterError {
    let reason = f.lock().expect("failure lock").clone();
    node_error(name, reason.unwrap_or_else(|| format!("{what} ended early")))
}

impl TaskLinks {
    /// Opens writers to `send_to` and readers from `recv_from` (participant indices into
    /// `nodes`) for `task` and `phase`.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        task: u64,
        phase: u32,
        me: usize,
        nodes: &[Option<NodeInfo>],
        send_to: &BTreeSet<usize>,
        recv_from: &BTreeSet<usize>,
        my_host: &str,
        secret: &ClusterSecret,
        inbox: &Inbox,
    ) -> TaskLinks {
        let name = |p: usize| {
            nodes[p]
                .as_ref()
                .map_or_else(|| format!("participant {p}"), |n| n.name.clone())
        };
        let mut links = TaskLinks {
            out: HashMap::new(),
            inp: HashMap::new(),
            names: (0..nodes.len()).map(|p| (p, name(p))).collect(),
            writers: Vec::new(),
            readers: Vec::new(),
        };
        for &to in send_to {
            let (tx, mut rx) = mpsc::channel::<Vec<u8>>(DEPTH);
            let failure: Failure = Arc::default();
            let node = nodes[to].clone().expect("a receiver has a node");
            let endpoint = node.endpoint_from(my_host).clone();
            let secret = secret.clone();
            let fail = failure.clone();
            let writer = tokio::spawn(async move {
                let result = async {
                    let mut conn = open(
                        &endpoint,
                        &secret,
                        &Hello::Peer {
                            task,
                            from: me,
                            phase,
                        },
                    )
                    .await?;
                    while let Some(message) = rx.recv().await {
                        conn.send_data(&message).await?;
                    }
                    conn.shutdown().await?;
                    Ok::<(), ClusterError>(())
                }
                .await;
                if let Err(e) = &result {
                    *fail.lock().expect("failure lock") = Some(e.to_string());
                }
                result
            });
            links.out.insert(to, (tx, failure));
            links.writers.push((node.name.clone(), writer));
        }
        for &from in recv_from {
            let (tx, rx) = mpsc::channel::<Vec<u8>>(DEPTH);
            let failure: Failure = Arc::default();
            let fail = failure.clone();
            let inbox = inbox.clone();
            links.readers.push(tokio::spawn(async move {
                let result = async {
                    let mut reader = inbox.take(task, phase, from).await?;
                    loop {
                        let mut buf = Vec::new();
                        match reader.recv_data(&mut buf).await {
                            Ok(()) => {
                                if tx.send(buf).await.is_err() {
                                    return Ok(());
                                }
                            }
                            Err(eckpt_proto::ProtoError::Closed) => return Ok(()),
                            Err(e) => return Err(ClusterError::from(e)),
                        }
                    }
                }
                .await;
                if let Err(e) = result {
                    *fail.lock().expect("failure lock") = Some(e.to_string());
                }
            }));
            links.inp.insert(from, (rx, failure));
        }
        links
    }

    /// Closes the writers and waits until everything sent has been handed to the kernel;
    /// the first writer error, if any.
    pub async fn finish(mut self) -> Result<(), ClusterError> {
        self.out.clear();
        let mut first = None;
        for (name, writer) in self.writers.drain(..) {
            let result = writer.await.map_err(|e| node_error(&name, e)).and_then(|r| r);
            if let Err(e) = result {
                first.get_or_insert(node_error(&name, e));
            }
        }
        for reader in self.readers.drain(..) {
            reader.abort();
        }
        first.map_or(Ok(()), Err)
    }

    /// Takes the receiving half of the link from `from` (for concurrent readers).
    pub fn take_receiver(&mut self, from: usize) -> Option<(mpsc::Receiver<Vec<u8>>, Failure)> {
        self.inp.remove(&from)
    }

    /// A sender to `to` that can be cloned into concurrent tasks.
    pub fn sender(&self, to: usize) -> Option<mpsc::Sender<Vec<u8>>> {
        self.out.get(&to).map(|(tx, _)| tx.clone())
    }
}

impl Links<ClusterError> for TaskLinks {
    fn send(&mut self, to: usize, message: Vec<u8>) -> Result<(), ClusterError> {
        let (tx, failure) = self
            .out
            .get(&to)
            .ok_or_else(|| ClusterError::Invalid(format!("no link to participant {to}")))?;
        tx.blocking_send(message)
            .map_err(|_| failure_of(failure, &self.names[&to], "connection"))
    }

    fn recv(&mut self, from: usize) -> Result<Vec<u8>, ClusterError> {
        let (rx, failure) = self
            .inp
            .get_mut(&from)
            .ok_or_else(|| ClusterError::Invalid(format!("no link from participant {from}")))?;
        rx.blocking_recv()
            .ok_or_else(|| failure_of(failure, &self.names[&from], "stream"))
    }
}
