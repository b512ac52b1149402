//! The risk of losing a checkpoint: a group of `k + m` nodes survives `m` losses, but once
//! one member is lost the group stays exposed until redundancy is restored — the failure
//! detected, the lost data decoded and installed, the group encoded anew: the model's own
//! recovery time ([`crate::predict::RecoveryPrediction::seconds`]). If `m` more of its
//! members fail within that window, the group has lost more than `m` and its committed
//! epoch cannot be decoded: the job restarts from the flush level on shared storage (or from
//! the beginning without one).
//!
//! Nodes fail independently, each at rate `λ = 1/MTBF` (exponential lifetimes). Over a
//! period `T`, the members of a group of `n` nodes start `n·λ·T` such windows on average,
//! and within a window of `W` seconds each of the other `n − 1` members fails with
//! probability `p = 1 − e^{−λW}`, so a window ends in a loss with the binomial tail
//! `P(X ≥ m)`, `X ~ Binomial(n − 1, p)`. Losses across windows and groups are rare events of
//! a Poisson process: the expected number over `T` is `Σ_groups n·λ·T·P(X ≥ m)` and the
//! probability of at least one is `1 − e^{−expected}`.
//!
//! For `m = 2` that is about `N·λT·C(n−1, 2)·(λW)²` for `N` nodes in groups of `n`: the risk
//! grows with the square of the group size, which is what a recommendation of ever larger
//! groups (less parity) ignored. What the binomial does not see are correlated failures (a
//! rack, a power supply, a switch taking several members at once): those are what failure
//! domains are for (`eckpt up --domain`, groups formed across them), and with them a domain's
//! loss costs each group at most its share of members. A second failure during a recovery
//! restarts it, which lengthens the window somewhat beyond `W`; the estimate ignores that
//! (a small correction next to the `(λW)^m` term when `λW` is tiny).

use serde::{Deserialize, Serialize};

use crate::scenario::GroupShape;

/// The default bound of [`crate::recommend::Constraints::max_loss_risk`]: a probability of
/// `10⁻⁶` per job-day that some group loses more than `m` members within its window.
///
/// Why this figure: a loss beyond `m` is not the end of the job — it restarts from the
/// flush level — but it throws away the work since the last flush and the node level's
/// reason to exist. At `10⁻⁶` per day a job running without end meets it about once in
/// 2,700 years: far below the other causes of losing a job (the shared file system's own
/// outages, software faults), so the bound never costs a job measurable efficiency; what it
/// rules out are groups so large, windows so long or nodes so unreliable that a loss beyond
/// `m` becomes a matter of years — e.g. `k = 254, m = 2` groups of 16 GiB nodes on a
/// 4,096-node cluster whose nodes fail once a year (3 · 10⁻⁶ per day).
pub const DEFAULT_MAX_LOSS_RISK: f64 = 1e-6;

/// The period the default bound is stated per: a day of the job.
pub const DAY_S: f64 = 86_400.0;

/// The risk that some group loses more than `m` members before it is protected again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossRisk {
    /// Seconds a group stays exposed after losing a member (the predicted recovery).
    pub window_s: f64,
    /// The period the risk is over (seconds): the job's length, a day by default.
    pub period_s: f64,
    /// Expected number of groups losing more than `m` members over the period.
    pub expected_losses: f64,
    /// Probability that at least one group does.
    pub probability: f64,
}

/// `P(X ≥ r)` for `X ~ Binomial(n, p)`, accurate for the tiny `p` of failures within a
/// recovery window (summed from the `r`-th term up, in logarithms, never as `1 − P(X < r)`).
pub fn binomial_tail(n: usize, r: usize, p: f64) -> f64 {
    if r == 0 {
        return 1.0;
    }
    if r > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    // ln of the r-th term: C(n, r) · p^r · (1 − p)^(n − r).
    let ln_choose: f64 = (1..=r).map(|i| ((n - r + i) as f64 / i as f64).ln()).sum();
    let ln_q = (-p).ln_1p();
    let mut term = (ln_choose + r as f64 * p.ln() + (n - r) as f64 * ln_q).exp();
    let odds = p / (1.0 - p);
    let mut sum = 0.0;
    for j in r..=n {
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
        term *= (n - j) as f64 / (j + 1) as f64 * odds;
    }
    sum.min(1.0)
}

/// The risk over `period_s` seconds for `groups`, nodes failing independently with a mean
/// time between failures of `node_mtbf_s`, each group exposed for `window_s` after a loss.
pub fn loss_risk(groups: &[GroupShape], node_mtbf_s: f64, window_s: f64, period_s: f64) -> LossRisk {
    let exposed = -(-window_s.max(0.0) / node_mtbf_s).exp_m1();
    let expected_losses: f64 = groups
        .iter()
        .map(|g| {
            let n = g.members();
            let windows = n as f64 * period_s / node_mtbf_s;
            windows * binomial_tail(n - 1, g.m, exposed)
        })
        .sum();
    LossRisk {
        window_s,
        period_s,
        expected_losses,
        probability: -(-expected_losses).exp_m1(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YEAR: f64 = 365.25 * DAY_S;

    fn shapes(nodes: usize, k: usize, m: usize) -> Vec<GroupShape> {
        eckpt_coding::policy::group_sizes(nodes, k, m)
            .into_iter()
            .map(|(k, _)| GroupShape { k, m })
            .collect()
    }

    #[test]
    fn binomial_tails_match_direct_sums() {
        let direct = |n: usize, r: usize, p: f64| -> f64 {
            (r..=n)
                .map(|j| {
                    let c: f64 = (1..=j).map(|i| (n - j + i) as f64 / i as f64).product();
                    c * p.powi(j as i32) * (1.0 - p).powi((n - j) as i32)
                })
                .sum()
        };
        for (n, r, p) in [
            (5, 2, 0.1),
            (10, 3, 0.5),
            (20, 1, 0.01),
            (255, 2, 1e-3),
            (17, 17, 0.9),
        ] {
            let (a, b) = (binomial_tail(n, r, p), direct(n, r, p));
            assert!((a - b).abs() <= 1e-12 * b.max(1e-300), "{n} {r} {p}: {a} vs {b}");
        }
        assert_eq!(binomial_tail(5, 0, 0.3), 1.0);
        assert_eq!(binomial_tail(5, 6, 0.3), 0.0);
        assert_eq!(binomial_tail(5, 2, 0.0), 0.0);
        // Tiny p: C(255, 2)·p² to the first order, where 1 − P(X < 2) would cancel to 0.
        let p = 1e-9;
        let t = binomial_tail(255, 2, p);
        assert!((t / (255.0 * 254.0 / 2.0 * p * p) - 1.0).abs() < 1e-6, "{t}");
    }

    #[test]
    fn the_risk_grows_with_the_group_the_window_and_the_failure_rate() {
        let risk = |k: usize, window: f64, mtbf: f64| {
            loss_risk(&shapes(4096, k, 2), mtbf, window, DAY_S).probability
        };
        // m = 2: about N·λT·C(n−1, 2)·(λW)², so groups of 256 against groups of 18 carry
        // (255·254)/(17·16) ≈ 238 times the risk.
        let ratio = risk(254, 90.0, YEAR) / risk(16, 90.0, YEAR);
        assert!(ratio > 200.0 && ratio < 260.0, "{ratio}");
        assert!(
            risk(16, 180.0, YEAR) > 3.9 * risk(16, 90.0, YEAR),
            "(λW)²: twice the window, 4×"
        );
        assert!(risk(16, 90.0, YEAR / 2.0) > 7.9 * risk(16, 90.0, YEAR), "λ³: 8×");
        // The case the default bound rules out, and what it leaves.
        assert!(
            risk(254, 92.0, YEAR) > DEFAULT_MAX_LOSS_RISK,
            "{}",
            risk(254, 92.0, YEAR)
        );
        assert!(risk(32, 92.0, YEAR) < DEFAULT_MAX_LOSS_RISK / 10.0);
    }

    #[test]
    fn a_closed_form_for_one_group() {
        // One group of 6 (4+2), MTBF 10⁶ s, window 1000 s, over 10⁶ s: 6 windows expected,
        // each lost with P(X ≥ 2), X ~ B(5, 1 − e^{−10⁻³}).
        let r = loss_risk(&[GroupShape { k: 4, m: 2 }], 1e6, 1e3, 1e6);
        let p = 1.0 - (-1e-3f64).exp();
        let tail = 1.0 - (1.0 - p).powi(5) - 5.0 * p * (1.0 - p).powi(4);
        assert!((r.expected_losses - 6.0 * tail).abs() < 1e-9 * r.expected_losses);
        assert!((r.probability - (1.0 - (-6.0 * tail).exp())).abs() < 1e-15);
        assert_eq!(
            loss_risk(&[GroupShape { k: 4, m: 2 }], 1e6, 0.0, 1e6).probability,
            0.0
        );
    }
}
