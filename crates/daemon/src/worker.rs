//! Where the daemons' blocking work runs — file I/O, the coding executor, folding parity —
//! and the channels between it and their async tasks.
//!
//! In the daemons a worker is a thread of tokio's blocking pool (or one of its own), and a
//! channel is tokio's `mpsc`. In a deterministic simulation ([`simulate`]) the async tasks
//! of every simulated host run on one thread, in virtual time, and a worker thread running
//! beside them would make a run depend on how the OS schedules it. There, workers hand
//! control back and forth with that thread: whatever wakes a worker (starting it, a message
//! for it, room in the channel it waits to send on) then waits until every worker is
//! blocked again on a channel of this module, or has ended. A worker's work thus takes no
//! virtual time, and happens at one place in the sequence of events, however fast the
//! machine. A worker may still wait on anything else (a file, another worker): it counts
//! as running meanwhile. It must not wait on an async task other than through a channel of
//! this module, or the hand-off waits for ever (and says so after [`STUCK`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use eckpt_cluster_api::ClusterError;

/// How long a hand-off waits for the workers before it gives up as a bug: a worker that
/// waits on something the simulation cannot see.
pub const STUCK: Duration = Duration::from_secs(120);

static SIMULATED: AtomicBool = AtomicBool::new(false);

/// Draws the virtual time one simulated worker's result takes to reach its caller.
pub type Latency = Box<dyn FnMut() -> Duration + Send>;

/// The simulation's [`Latency`], if it asked for one ([`simulate_latency`]).
static LATENCY: Mutex<Option<Latency>> = Mutex::new(None);

/// Workers of this process running, not blocked on a channel of this module (simulation).
static RUNNING: Mutex<usize> = Mutex::new(0);
static SETTLED: Condvar = Condvar::new();

/// Makes this process a simulation's: workers and channels made from now on hand control
/// back and forth with the simulation's thread. For good; call it before any worker starts.
pub fn simulate() {
    SIMULATED.store(true, Ordering::SeqCst);
}

/// Makes each simulated worker's result reach its caller `latency()` of virtual time after
/// the work is done, as a disk's reads, writes and syncs take time (`None`: at once, the
/// hand-off alone). Without it a journal write, say, falls between two events with nothing
/// in between, and no fault ever lands inside it. Each result draws once, in the order the
/// simulation's thread finds them done, so a seeded `latency` replays.
pub fn simulate_latency(latency: Option<Latency>) {
    *lock(&LATENCY) = latency;
}

/// A simulated worker's latency, drawn now.
fn drawn_latency() -> Duration {
    lock(&LATENCY).as_mut().map_or(Duration::ZERO, |draw| draw())
}

fn simulated() -> bool {
    SIMULATED.load(Ordering::Relaxed)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::crash_only::lock(mutex)
}

fn woke_one() {
    *lock(&RUNNING) += 1;
}

fn one_blocked() {
    let mut running = lock(&RUNNING);
    *running -= 1;
    if *running == 0 {
        SETTLED.notify_all();
    }
}

/// Waits until no worker runs (simulation only).
fn settle() {
    let running = lock(&RUNNING);
    let (_running, waited) = SETTLED
        .wait_timeout_while(running, STUCK, |running| *running > 0)
        .unwrap_or_else(|e| e.into_inner());
    assert!(
        !waited.timed_out(),
        "a worker ran for {STUCK:?} without blocking on a channel: it waits on something the simulation cannot see"
    );
}

/// A worker's result, awaited by its async caller.
pub struct Worker<T> {
    inner: WorkerInner<T>,
}

enum WorkerInner<T> {
    Pool(tokio::task::JoinHandle<T>),
    Thread(Arc<Mutex<Outcome<T>>>, Delivery),
}

/// When a thread worker's result, once done, reaches its caller: at once, or after a
/// simulated latency ([`simulate_latency`]).
enum Delivery {
    /// Not done when last polled.
    Undrawn,
    /// Reaches the caller when this virtual sleep ends.
    After(std::pin::Pin<Box<tokio::time::Sleep>>),
    /// Now.
    Due,
}

/// A simulated worker's outcome, and who waits for it.
struct Outcome<T> {
    result: Option<std::thread::Result<T>>,
    waiter: Option<Waker>,
}

/// Runs `f` on a worker: tokio's blocking pool in the daemons.
pub fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Worker<T> {
    if simulated() {
        return spawn_simulated("eckpt-worker".into(), f, |_| {});
    }
    Worker {
        inner: WorkerInner::Pool(tokio::task::spawn_blocking(f)),
    }
}

/// Runs `f` on a thread of its own named `name`, which `prepare` sets up first (a thread
/// that lowers its priority, work that lasts as long as a stream does).
pub fn spawn_thread<T: Send + 'static>(
    name: String,
    prepare: impl FnOnce(&str) + Send + 'static,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<Worker<T>, ClusterError> {
    if simulated() {
        return Ok(spawn_simulated(name, f, prepare));
    }
    let outcome = Arc::new(Mutex::new(Outcome {
        result: None,
        waiter: None,
    }));
    let slot = outcome.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            prepare(&name);
            finish(&slot, std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        })
        .map_err(|e| ClusterError::Internal(format!("starting a worker thread: {e}")))?;
    Ok(Worker {
        inner: WorkerInner::Thread(outcome, Delivery::Due),
    })
}

fn finish<T>(slot: &Mutex<Outcome<T>>, result: std::thread::Result<T>) {
    let mut outcome = lock(slot);
    outcome.result = Some(result);
    if let Some(waiter) = outcome.waiter.take() {
        waiter.wake();
    }
}

fn spawn_simulated<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
    prepare: impl FnOnce(&str) + Send + 'static,
) -> Worker<T> {
    let outcome = Arc::new(Mutex::new(Outcome {
        result: None,
        waiter: None,
    }));
    let slot = outcome.clone();
    woke_one();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            IS_WORKER.with(|w| w.set(true));
            prepare(&name);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            finish(&slot, result);
            one_blocked();
        })
        .expect("a simulation starts its worker threads");
    settle_unless_worker();
    Worker {
        inner: WorkerInner::Thread(outcome, Delivery::Undrawn),
    }
}

impl<T> Worker<T> {
    /// The worker's result; a panic of the worker is an internal error.
    pub async fn join(self) -> Result<T, ClusterError> {
        self.await
    }
}

/// Resolves to the worker's result (as [`Worker::join`]), and may be polled by reference.
impl<T> std::future::Future for Worker<T> {
    type Output = Result<T, ClusterError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let panicked = |e: &dyn std::fmt::Display| ClusterError::Internal(format!("worker thread: {e}"));
        match &mut self.inner {
            WorkerInner::Pool(handle) => std::pin::Pin::new(handle)
                .poll(cx)
                .map(|r| r.map_err(|e| panicked(&e))),
            WorkerInner::Thread(outcome, delivery) => {
                let mut outcome = lock(outcome);
                if outcome.result.is_some() && matches!(delivery, Delivery::Undrawn) {
                    let latency = drawn_latency();
                    *delivery = match latency.is_zero() {
                        true => Delivery::Due,
                        false => Delivery::After(Box::pin(tokio::time::sleep(latency))),
                    };
                }
                if let Delivery::After(sleep) = delivery {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    *delivery = Delivery::Due;
                }
                match outcome.result.take() {
                    Some(result) => Poll::Ready(result.map_err(|panic| {
                        let what = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        panicked(&format!("panicked: {what}"))
                    })),
                    None => {
                        outcome.waiter = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        }
    }
}

/// A bounded channel of `depth` messages between async tasks and workers; either end may
/// be used from either side (`send`/`recv` from a task, `blocking_*` from a worker).
pub fn channel<T: Send + 'static>(depth: usize) -> (Sender<T>, Receiver<T>) {
    if simulated() {
        let shared = Arc::new(Simulated {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                depth: depth.max(1),
                senders: 1,
                receiver: true,
                receiver_parked: false,
                senders_parked: 0,
                senders_woken: 0,
                receiver_waker: None,
                sender_wakers: Vec::new(),
            }),
            moved: Condvar::new(),
        });
        return (
            Sender {
                inner: SenderInner::Simulated(shared.clone()),
            },
            Receiver {
                inner: ReceiverInner::Simulated(shared),
            },
        );
    }
    let (tx, rx) = tokio::sync::mpsc::channel(depth.max(1));
    (
        Sender {
            inner: SenderInner::Tokio(tx),
        },
        Receiver {
            inner: ReceiverInner::Tokio(rx),
        },
    )
}

/// The sending end of a [`channel`]; cloned for more senders.
pub struct Sender<T> {
    inner: SenderInner<T>,
}

enum SenderInner<T> {
    Tokio(tokio::sync::mpsc::Sender<T>),
    Simulated(Arc<Simulated<T>>),
}

/// The receiving end of a [`channel`].
pub struct Receiver<T> {
    inner: ReceiverInner<T>,
}

enum ReceiverInner<T> {
    Tokio(tokio::sync::mpsc::Receiver<T>),
    Simulated(Arc<Simulated<T>>),
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

/// A simulated channel: every change under one lock, so that the side that wakes a parked
/// worker counts it as running before the worker can run (and block again).
struct Simulated<T> {
    state: Mutex<State<T>>,
    /// Signalled when a worker parked on this channel may go on.
    moved: Condvar,
}

struct State<T> {
    queue: VecDeque<T>,
    depth: usize,
    senders: usize,
    receiver: bool,
    /// A worker waits to receive (it does not count as running).
    receiver_parked: bool,
    /// Workers waiting for room to send.
    senders_parked: usize,
    /// Counts the wake-ups of the senders waiting for room.
    senders_woken: u64,
    receiver_waker: Option<Waker>,
    sender_wakers: Vec<Waker>,
}

impl<T> State<T> {
    /// Wakes a worker waiting to receive, now that there is a message or no sender.
    fn wake_receiver(&mut self, moved: &Condvar) {
        if self.receiver_parked {
            self.receiver_parked = false;
            woke_one();
            moved.notify_all();
        }
        if let Some(waker) = self.receiver_waker.take() {
            waker.wake();
        }
    }

    /// Wakes the senders waiting for room, now that there is room or no receiver.
    fn wake_senders(&mut self, moved: &Condvar) {
        if self.senders_parked > 0 {
            for _ in 0..std::mem::take(&mut self.senders_parked) {
                woke_one();
            }
            self.senders_woken += 1;
            moved.notify_all();
        }
        for waker in self.sender_wakers.drain(..) {
            waker.wake();
        }
    }
}

impl<T: Send + 'static> Sender<T> {
    /// Sends `message` from an async task, waiting for room; the message back if the
    /// receiver is gone.
    pub async fn send(&self, message: T) -> Result<(), T> {
        match &self.inner {
            SenderInner::Tokio(tx) => tx.send(message).await.map_err(|e| e.0),
            SenderInner::Simulated(shared) => {
                let mut message = Some(message);
                let sent = std::future::poll_fn(|cx| {
                    let mut state = lock(&shared.state);
                    if !state.receiver {
                        return Poll::Ready(Err(message.take().expect("sent once")));
                    }
                    if state.queue.len() >= state.depth {
                        state.sender_wakers.push(cx.waker().clone());
                        return Poll::Pending;
                    }
                    state.queue.push_back(message.take().expect("sent once"));
                    state.wake_receiver(&shared.moved);
                    Poll::Ready(Ok(()))
                })
                .await;
                settle();
                sent
            }
        }
    }

    /// Sends `message` from a worker, blocking while the channel is full; the message back
    /// if the receiver is gone.
    pub fn blocking_send(&self, message: T) -> Result<(), T> {
        match &self.inner {
            SenderInner::Tokio(tx) => tx.blocking_send(message).map_err(|e| e.0),
            SenderInner::Simulated(shared) => {
                let mut state = lock(&shared.state);
                loop {
                    if !state.receiver {
                        return Err(message);
                    }
                    if state.queue.len() < state.depth {
                        state.queue.push_back(message);
                        state.wake_receiver(&shared.moved);
                        return Ok(());
                    }
                    let woken = state.senders_woken;
                    state.senders_parked += 1;
                    one_blocked();
                    // Whoever makes room (or drops the receiver) counts this worker running
                    // again before it is let go.
                    while state.senders_woken == woken {
                        state = shared.moved.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Sender<T> {
        let inner = match &self.inner {
            SenderInner::Tokio(tx) => SenderInner::Tokio(tx.clone()),
            SenderInner::Simulated(shared) => {
                lock(&shared.state).senders += 1;
                SenderInner::Simulated(shared.clone())
            }
        };
        Sender { inner }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let SenderInner::Simulated(shared) = &self.inner {
            let mut state = lock(&shared.state);
            state.senders -= 1;
            if state.senders == 0 {
                state.wake_receiver(&shared.moved);
                drop(state);
                settle_unless_worker();
            }
        }
    }
}

impl<T: Send + 'static> Receiver<T> {
    /// The next message, from an async task; `None` once every sender is gone and the
    /// channel is empty.
    pub async fn recv(&mut self) -> Option<T> {
        match &mut self.inner {
            ReceiverInner::Tokio(rx) => rx.recv().await,
            ReceiverInner::Simulated(shared) => {
                let shared = shared.clone();
                let received = std::future::poll_fn(|cx| {
                    let mut state = lock(&shared.state);
                    if let Some(message) = state.queue.pop_front() {
                        state.wake_senders(&shared.moved);
                        return Poll::Ready(Some(message));
                    }
                    if state.senders == 0 {
                        return Poll::Ready(None);
                    }
                    state.receiver_waker = Some(cx.waker().clone());
                    Poll::Pending
                })
                .await;
                settle();
                received
            }
        }
    }

    /// The next message, from a worker, blocking until there is one; `None` once every
    /// sender is gone and the channel is empty.
    pub fn blocking_recv(&mut self) -> Option<T> {
        match &mut self.inner {
            ReceiverInner::Tokio(rx) => rx.blocking_recv(),
            ReceiverInner::Simulated(shared) => {
                let mut state = lock(&shared.state);
                loop {
                    if let Some(message) = state.queue.pop_front() {
                        state.wake_senders(&shared.moved);
                        return Some(message);
                    }
                    if state.senders == 0 {
                        return None;
                    }
                    state.receiver_parked = true;
                    one_blocked();
                    // Whoever sends (or drops the last sender) counts this worker running
                    // again before it is let go.
                    while state.receiver_parked {
                        state = shared.moved.wait(state).unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let ReceiverInner::Simulated(shared) = &self.inner {
            let mut state = lock(&shared.state);
            state.receiver = false;
            state.wake_senders(&shared.moved);
            drop(state);
            settle_unless_worker();
        }
    }
}

thread_local! {
    /// Whether this thread is a simulated worker (which must not wait for the others).
    static IS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// After an end of a channel is dropped: the simulation's thread waits for the workers it
/// may have woken; a worker dropping its end goes on (it runs, and is waited for).
fn settle_unless_worker() {
    if !IS_WORKER.with(|w| w.get()) {
        settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_worker_and_a_task_exchange_messages_both_ways() {
        let (to_worker, mut inbox) = channel::<u32>(1);
        let (outbox, mut from_worker) = channel::<u32>(1);
        let worker = spawn(move || {
            let mut sum = 0;
            while let Some(n) = inbox.blocking_recv() {
                sum += n;
                outbox.blocking_send(n * 2).unwrap();
            }
            sum
        });
        for n in 1..=5 {
            to_worker.send(n).await.unwrap();
            assert_eq!(from_worker.recv().await, Some(n * 2));
        }
        drop(to_worker);
        assert_eq!(worker.join().await.unwrap(), 15);
        assert_eq!(from_worker.recv().await, None);
    }

    #[tokio::test]
    async fn a_worker_that_panics_is_an_internal_error() {
        let e = spawn(|| -> u32 { panic!("boom") }).join().await.unwrap_err();
        assert!(e.to_string().contains("worker thread"), "{e}");
    }
}
