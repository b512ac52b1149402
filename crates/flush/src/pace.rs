//! Bounding a flush's throughput (`--flush-rate`): the copy to shared storage runs beside
//! the encode of later epochs on the same disks and links, and must not starve it.

use std::time::{Duration, Instant};

/// How long to wait, after `bytes` were written in `elapsed`, so that the average rate
/// stays at or below `rate` bytes per second.
pub fn pace_delay(bytes: u64, rate: u64, elapsed: Duration) -> Duration {
    if rate == 0 {
        return Duration::ZERO;
    }
    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
    due.saturating_sub(elapsed)
}

/// Paces a stream of writes to at most `rate` bytes per second on average (`None`: as
/// fast as it goes). Counts from its first write.
#[derive(Debug)]
pub struct Pacer {
    rate: Option<u64>,
    start: Option<Instant>,
    bytes: u64,
}

impl Pacer {
    /// A pacer for `rate` bytes per second (`None` or 0: unbounded).
    pub fn new(rate: Option<u64>) -> Pacer {
        Pacer {
            rate: rate.filter(|&r| r > 0),
            start: None,
            bytes: 0,
        }
    }

    /// Accounts `bytes` about to be written, sleeping first if they would exceed the rate.
    pub fn take(&mut self, bytes: u64) {
        let start = *self.start.get_or_insert_with(Instant::now);
        self.bytes += bytes;
        if let Some(rate) = self.rate {
            // The bytes are paid for before they go, so the rate holds at every instant,
            // not only on average over the whole flush.
            let wait = pace_delay(self.bytes, rate, start.elapsed());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    /// Bytes accounted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_keeps_the_average_rate() {
        let mb = 1_000_000;
        assert_eq!(
            pace_delay(10 * mb, 10 * mb, Duration::ZERO),
            Duration::from_secs(1)
        );
        assert_eq!(
            pace_delay(10 * mb, 10 * mb, Duration::from_millis(400)),
            Duration::from_millis(600)
        );
        assert_eq!(
            pace_delay(10 * mb, 10 * mb, Duration::from_secs(3)),
            Duration::ZERO
        );
        assert_eq!(
            pace_delay(u64::MAX, 0, Duration::ZERO),
            Duration::ZERO,
            "0: unbounded"
        );
    }

    #[test]
    fn an_unbounded_pacer_only_counts() {
        let mut p = Pacer::new(None);
        p.take(1 << 40);
        p.take(5);
        assert_eq!(p.bytes(), (1 << 40) + 5);
        let mut p = Pacer::new(Some(0));
        p.take(1 << 40);
        assert_eq!(p.bytes(), 1 << 40);
    }
}
