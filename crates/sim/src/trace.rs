//! What happened in a simulated run, line by line, with the virtual time of each: faults
//! injected, the workload's steps, the daemons' ends, invariants broken. Two runs of one
//! seed write the same lines; a failing seed prints them.

use std::cell::RefCell;
use std::fmt::Display;
use std::rc::Rc;
use std::time::Duration;

/// A run's trace, shared by the hosts and the driver of one simulation (one thread).
pub type Trace = Rc<Lines>;

/// The lines of a trace.
#[derive(Default)]
pub struct Lines {
    lines: RefCell<Vec<String>>,
    /// Also print each line as it is written (to follow a run that hangs or aborts).
    echo: bool,
}

impl Lines {
    /// An empty trace; `echo`: print lines as they come too.
    pub fn new(echo: bool) -> Trace {
        Rc::new(Lines {
            lines: RefCell::default(),
            echo,
        })
    }

    /// Notes `what` happened on host `who`, now (from inside a host of the simulation).
    pub fn event(&self, who: &str, what: impl Display) {
        self.at(turmoil::sim_elapsed().unwrap_or_default(), who, what);
    }

    /// Notes `what` happened on `who` at virtual time `at`.
    pub fn at(&self, at: Duration, who: &str, what: impl Display) {
        let line = format!("{:>10.3}s {who}: {what}", at.as_secs_f64());
        if self.echo {
            eprintln!("{line}");
        }
        self.lines.borrow_mut().push(line);
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.borrow().clone()
    }
}
