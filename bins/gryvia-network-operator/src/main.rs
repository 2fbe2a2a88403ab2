//! `gryvia-network-operator`: network intelligence from the collectors' flow aggregates and
//! fabric signals (baselines and anomalies).
//!
//! A thin binary: its flags, the controllers it composes and its run loop are
//! `gryvia_client::operators::network`; the policy is in `gryvia_reconcile::network`.

use clap::Parser;
use gryvia_client::operators::{exit_code, init_logging, network};

fn main() -> std::process::ExitCode {
    let flags = network::Flags::parse();
    init_logging(&flags.operator.log_format);
    exit_code(network::run(&flags))
}
