//! Criterion benchmarks of Gryvia's hot paths live in `benches/`; figures are in
//! `benches/README.md`. This library is empty on purpose: the crate exists for its benches.
