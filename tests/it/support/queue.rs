//! What the tests read of the queue in Redis.

use std::collections::HashMap;

use crate::harness::TestEnv;

/// Fields of the `active` hash (in-flight counts): empty when no slot leaked.
pub async fn active_slots(env: &TestEnv) -> HashMap<String, String> {
    let mut c = env.queue.conn().await.unwrap();
    let mut slots = HashMap::new();
    for k in env.queue.partitions() {
        let part: HashMap<String, String> = redis::cmd("HGETALL").arg(&k.active).query_async(&mut c).await.unwrap();
        slots.extend(part);
    }
    slots
}
