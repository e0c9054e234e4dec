//! The allocator of every service binary ([`service_allocator!`]).
//!
//! glibc's malloc (malloc, free and their consolidation) was a fifth of the
//! api's and the worker's CPU under load (perf over the benchmark's phase
//! (a)); mimalloc's per-thread free lists cost a fraction of that
//! (docs/benchmarks.md, "Where a run's CPU goes"). A library must not choose the allocator of the
//! programs that link it, so each binary opts in with the macro.

pub use mimalloc::MiMalloc;

/// Makes mimalloc the global allocator of the binary it is called in (once,
/// at the crate root of a `main.rs`).
#[macro_export]
macro_rules! service_allocator {
    () => {
        #[global_allocator]
        static ALLOC: $crate::allocator::MiMalloc = $crate::allocator::MiMalloc;
    };
}
