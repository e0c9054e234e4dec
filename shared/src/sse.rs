//! Reading Server-Sent Events (`text/event-stream`): what a client of the
//! live streams (`GET /v1/runs/{id}/stream` and the others) receives. The
//! CLI's `watch` and `--wait` and the integration tests read streams with
//! it.

use serde_json::Value;

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub event: String,
    pub id: String,
    pub data: Value,
}

/// Splits a text/event-stream into events, across chunks cut anywhere;
/// comment lines (heartbeats) and blank lines are no events.
#[derive(Default)]
pub struct Parser {
    buf: String,
}

impl Parser {
    /// Takes a chunk of the body; returns the events it completed.
    pub fn push(&mut self, chunk: &str) -> Vec<Event> {
        self.buf.push_str(&chunk.replace("\r\n", "\n"));
        let mut out = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            let (mut event, mut id, mut data, mut any) = (String::from("message"), String::new(), String::new(), false);
            for line in block.lines().filter(|l| !l.is_empty() && !l.starts_with(':')) {
                let (k, v) = line.split_once(':').map_or((line, ""), |(k, v)| (k, v.strip_prefix(' ').unwrap_or(v)));
                any = true;
                match k {
                    "event" => event = v.to_string(),
                    "id" => id = v.to_string(),
                    "data" => {
                        if !data.is_empty() {
                            data.push('\n');
                        }
                        data.push_str(v);
                    }
                    _ => {}
                }
            }
            if any {
                out.push(Event { event, id, data: serde_json::from_str(&data).unwrap_or(Value::Null) });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_cut_at_blank_lines_across_chunks() {
        let mut p = Parser::default();
        assert_eq!(p.push(":\n\nevent: run\nid: 3\ndata: {\"run\":"), vec![]);
        let got = p.push("{\"status\":\"queued\"}}\n\nevent: end\nid: 3\ndata: {}\n\n");
        assert_eq!(
            got,
            vec![
                Event { event: "run".into(), id: "3".into(), data: json!({"run": {"status": "queued"}}) },
                Event { event: "end".into(), id: "3".into(), data: json!({}) },
            ]
        );
    }
}
