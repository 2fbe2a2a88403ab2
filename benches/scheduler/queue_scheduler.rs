//! The native queue scheduler alone (`gryvia_client::controllers::queue` in a ControllerSet of
//! its own), for `benches/scheduler/run`'s quota-only side: Kueue's runner measures Kueue
//! admitting Workloads with no Jobs or pods behind them, and this measures Gryvia's scheduler
//! on the same footing (admissions written to GryviaAIJobs, no AI job controller making batch
//! Jobs). Takes the flags every operator takes.
//!
//!   queue-scheduler --lease-namespace NS --metrics-addr ADDR

use clap::Parser;
use gryvia_client::controllers::queue;
use gryvia_client::operators::{
    ControllerSet, OperatorFlags, exit_code, init_logging, run_blocking,
};

/// The native queue scheduler alone.
#[derive(Parser, Debug)]
#[command(name = "queue-scheduler")]
struct Flags {
    #[command(flatten)]
    operator: OperatorFlags,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.operator.log_format);
    exit_code(run_blocking(
        "gryvia-queue-scheduler",
        &flags.operator,
        ControllerSet::new().with(queue::controller),
        None,
    ))
}
