//! Bytes a peer sends as data frames, taken in window by window by a writer on a blocking
//! thread (the store writing a rank's item or image): the frames pass through a queue of
//! [`QUEUE`] frames, so memory holds a few frames and the writer's window, never the whole
//! of what is sent, and the network and the disk overlap. The writer hands each frame it
//! has taken in back to be received into again: a frame allocated per message would leave
//! the allocator holding as many as went by. A length announced beyond the room left on
//! the store's file system is refused before anything is received.

use std::path::Path;
use std::time::Duration;

use eckpt_cluster_api::{io_at, ClusterError};
use eckpt_daemon::worker;
use eckpt_proto::Connection;

/// Frames received and waiting to be taken in, besides the one the writer takes in and
/// the one being received: enough to keep both sides busy. A writer that falls behind
/// stops the reading, and TCP then stops the sender.
const QUEUE: usize = 1;

/// The frames as the writer sees them: a byte stream it fills its windows from.
pub struct Frames {
    queue: worker::Receiver<Vec<u8>>,
    /// Frames taken in, back to the receiver.
    spent: std::sync::mpsc::Sender<Vec<u8>>,
    frame: Vec<u8>,
    used: usize,
    what: String,
}

impl Frames {
    /// Fills `window` with the next bytes sent; an error if they end first.
    pub fn fill(&mut self, window: &mut [u8]) -> Result<(), ClusterError> {
        let mut done = 0;
        while done < window.len() {
            if self.used == self.frame.len() {
                let next = self
                    .queue
                    .blocking_recv()
                    .ok_or_else(|| ClusterError::Protocol(format!("{} ended early", self.what)))?;
                let _ = self.spent.send(std::mem::replace(&mut self.frame, next));
                self.used = 0;
            }
            let n = (self.frame.len() - self.used).min(window.len() - done);
            window[done..done + n].copy_from_slice(&self.frame[self.used..self.used + n]);
            (done, self.used) = (done + n, self.used + n);
        }
        Ok(())
    }
}

/// Refuses to take in `len` bytes (`what`, as a peer announced them) that the file system
/// of `store` has no room for, before anything is received or written.
pub fn check_room(store: &Path, what: &str, len: u64) -> Result<(), ClusterError> {
    let free = free_bytes(store)?;
    if len > free {
        return Err(ClusterError::Refused(format!(
            "{what} of {len} bytes announced, more than this node's {free} bytes free for its store"
        )));
    }
    Ok(())
}

/// Bytes an unprivileged writer may still put on the file system of `path`.
fn free_bytes(path: &Path) -> Result<u64, ClusterError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ClusterError::Internal(format!("{} holds a NUL byte", path.display())))?;
    // SAFETY: statvfs fills the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io_at(path)(std::io::Error::last_os_error()));
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Receives the `total` bytes of `what` as data frames from `conn` while `write` takes
/// them in through [`Frames`] on a blocking thread; what `write` returns. More bytes than
/// announced, or an empty frame before the end, is a protocol error. Each frame is awaited
/// at most `peer_wait`: a sender that stopped mid-way (SIGSTOPped, wedged; its kernel still
/// acknowledges) would otherwise hold this handler, and the rank's store lock, for ever.
pub async fn receive<T: Send + 'static>(
    conn: &mut Connection,
    total: u64,
    what: String,
    peer_wait: Duration,
    write: impl FnOnce(&mut Frames) -> Result<T, ClusterError> + Send + 'static,
) -> Result<T, ClusterError> {
    let (tx, queue) = worker::channel::<Vec<u8>>(QUEUE);
    let (spent, reuse) = std::sync::mpsc::channel();
    let mut frames = Frames {
        queue,
        spent,
        frame: Vec::new(),
        used: 0,
        what: what.clone(),
    };
    let writer = worker::spawn(move || write(&mut frames));
    let mut received = 0u64;
    let mut result = Ok(());
    while received < total {
        let mut frame = reuse.try_recv().unwrap_or_default();
        match tokio::time::timeout(peer_wait, conn.recv_data(&mut frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                result = Err(e.into());
                break;
            }
            Err(_) => {
                result = Err(ClusterError::Link(format!(
                    "{what}: its sender said nothing for {:.1} s after {received} of {total} bytes (stopped, or cut off)",
                    peer_wait.as_secs_f64()
                )));
                break;
            }
        }
        if frame.is_empty() || received + frame.len() as u64 > total {
            result = Err(ClusterError::Protocol(format!(
                "{what}: {} bytes after {received} of the announced {total}",
                frame.len()
            )));
            break;
        }
        received += frame.len() as u64;
        if tx.send(frame).await.is_err() {
            break; // the writer failed: its error says why
        }
    }
    drop(tx);
    let written = writer.await?;
    result.and(written)
}
