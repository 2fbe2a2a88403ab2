//! Progress of long waits (a job running, a drain, CRDs becoming Established): a spinner with
//! the elapsed time and the latest state on a terminal, plain lines (each state once) otherwise,
//! so logs and pipes read the same as before.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// One wait's progress on standard error.
pub struct Progress {
    bar: Option<ProgressBar>,
    last: String,
    /// Without a terminal, states are lines on standard output (a drain's report) rather than
    /// standard error (a job's phases beside its name on standard output).
    states_on_stdout: bool,
}

impl Progress {
    /// Starts showing progress of `what`: a spinner when standard error is a terminal, else
    /// each new state as a line on standard error.
    pub fn start(what: &str) -> Self {
        Self::new(what, false)
    }

    /// [`Progress::start`], with the plain lines on standard output.
    pub fn start_on_stdout(what: &str) -> Self {
        Self::new(what, true)
    }

    fn new(what: &str, states_on_stdout: bool) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) =
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {prefix}: {wide_msg}")
            {
                bar.set_style(style);
            }
            bar.set_prefix(what.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            bar,
            last: String::new(),
            states_on_stdout,
        }
    }

    /// The wait's current state: the spinner's message, or a line when it changed.
    pub fn state(&mut self, state: &str) {
        if state == self.last {
            return;
        }
        state.clone_into(&mut self.last);
        match &self.bar {
            Some(bar) => bar.set_message(state.to_owned()),
            None if self.states_on_stdout => println!("{state}"),
            None => eprintln!("{state}"),
        }
    }

    /// A line that stays (an event, not a state): printed above the spinner.
    pub fn line(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => println!("{line}"),
        }
    }

    /// Removes the spinner and leaves its last state as a line, as without a terminal; what
    /// was printed with [`Progress::line`] stays.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
            match (self.last.is_empty(), self.states_on_stdout) {
                (true, _) => {}
                (false, true) => println!("{}", self.last),
                (false, false) => eprintln!("{}", self.last),
            }
        }
    }
}
