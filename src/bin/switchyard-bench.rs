//! `switchyard-bench`: the benchmark driver that `scripts/bench` runs
//! (docs/benchmarks.md). `switchyard-bench --help` lists its options.

#[path = "../bench/mod.rs"]
mod bench;

fn main() -> std::process::ExitCode {
    bench::main()
}
