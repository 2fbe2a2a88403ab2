//! `gryvia-quota-operator`: reconciles GryviaTenant, GryviaQuota and GryviaBudget, and (opt-in) meters GPU
//! jobs into priced GryviaUsageRecords.
//!
//! A thin binary: its flags, the controllers it composes and its run loop are
//! `gryvia_client::operators::quota`; the policy is in `gryvia_reconcile`.

use clap::Parser;
use gryvia_client::operators::{exit_code, init_logging, quota};

fn main() -> std::process::ExitCode {
    let flags = quota::Flags::parse();
    init_logging(&flags.operator.log_format);
    exit_code(quota::run(&flags))
}
