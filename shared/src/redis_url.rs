//! The grammar of `REDIS_URL`: one node, or a cluster's nodes. Config
//! checks it, the queue connects by it.

/// The node URLs of a cluster `REDIS_URL`, or `None` for a single node:
/// `redis+cluster://a:1,b:2` or `redis://a:1,redis://b:2` (a node given
/// without a scheme takes the first node's).
pub fn cluster_nodes(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = match url.strip_prefix("redis+cluster://") {
        Some(rest) => ("redis://", rest),
        None if url.contains(',') => (if url.starts_with("rediss://") { "rediss://" } else { "redis://" }, url),
        None => return None,
    };
    let nodes = rest
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| if n.contains("://") { n.to_string() } else { format!("{scheme}{n}") })
        .collect();
    Some(nodes)
}

/// The node URLs `url` names: a cluster's nodes, or `url` itself.
pub fn node_urls(url: &str) -> Vec<String> {
    cluster_nodes(url).unwrap_or_else(|| vec![url.to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_nodes() {
        assert_eq!(cluster_nodes("redis://127.0.0.1:6379"), None);
        assert_eq!(
            cluster_nodes("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap(),
            ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
        );
        assert_eq!(
            cluster_nodes("redis://a:7000, redis://b:7001,c:7002").unwrap(),
            ["redis://a:7000", "redis://b:7001", "redis://c:7002"]
        );
        assert_eq!(node_urls("redis://127.0.0.1:6379"), ["redis://127.0.0.1:6379"]);
    }
}
