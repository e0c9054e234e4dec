//! The Lua scripts of `lua/`, embedded. `redis::Script` runs them with
//! EVALSHA and falls back to EVAL (loading them) on NOSCRIPT, so a Redis that
//! restarted empty needs no extra step.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("../../../lua/", $file))));
    };
    // A script that uses files of `lua/lib/`: Redis shares no code between
    // scripts, so the libraries go in front of the script, as one chunk.
    ($name:ident, $file:literal, lib $($lib:literal),+) => {
        pub static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                $(include_str!(concat!("../../../lua/lib/", $lib)),)+
                include_str!(concat!("../../../lua/", $file))
            ))
        });
    };
}

script!(ENQUEUE, "enqueue.lua", lib "fair.lua");
script!(DEQUEUE, "dequeue.lua", lib "fair.lua");
script!(ACK, "ack.lua", lib "slots.lua");
script!(REAP, "reap.lua", lib "slots.lua");
script!(PROMOTE, "promote.lua", lib "fair.lua");
script!(REMOVE, "remove.lua", lib "fair.lua");
script!(REMOVE_SCHEDULED, "remove_scheduled.lua");
script!(EXTEND_LEASES, "extend_leases.lua", lib "buckets.lua", "fair.lua");
script!(SET_LIMITS, "set_limits.lua");
script!(RESCHEDULE, "reschedule.lua");
script!(RECORD_DISPATCH, "record_dispatch.lua", lib "buckets.lua");
script!(COUNT_BY_JOB, "count_by_job.lua");
script!(SEED_RATE, "seed_rate.lua");
script!(FAIR_SWEEP, "fair_sweep.lua");
