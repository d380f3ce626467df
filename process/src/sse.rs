//! Reading a Server-Sent Events body as it arrives, as a browser's
//! `EventSource` parses it: lines (ended by `\n` or `\r\n`) split across
//! chunks are joined, an event is dispatched at its blank line with the
//! stream's last `id:` and its data lines joined, and comments are passed
//! on (they are taskq's keep-alive). One reader for the tests and the load
//! tool, which read taskq's streams (`GET /events`, `GET /board/live`)
//! through different clients: it takes bytes, not a client's body type.
//!
//! A reader must keep up with every event of an org, so the data is handed
//! over as text and left to the caller to parse, or not.

/// One dispatched part of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Event(Event),
    /// A comment line (`: ...`), without its colon and surrounding spaces.
    Comment(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The last `id:` of the stream so far, this event's or an earlier
    /// one's: what a reconnecting client sends as `Last-Event-ID`.
    pub id: Option<String>,
    /// The `event:` name; `None` for an unnamed event (`message` to a
    /// browser).
    pub event: Option<String>,
    /// The data lines, joined by `\n`.
    pub data: String,
}

/// An incremental reader: [`Parser::feed`] it each chunk in order.
#[derive(Debug, Default)]
pub struct Parser {
    /// The start of a line whose end has not arrived.
    partial: Vec<u8>,
    last_id: Option<String>,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl Parser {
    /// Reads `chunk`, calling `on_item` for every event and comment it
    /// completes.
    pub fn feed(&mut self, mut chunk: &[u8], mut on_item: impl FnMut(Item)) {
        while let Some(at) = chunk.iter().position(|&b| b == b'\n') {
            let line = &chunk[..at];
            chunk = &chunk[at + 1..];
            if self.partial.is_empty() {
                self.line(line, &mut on_item);
            } else {
                let mut joined = std::mem::take(&mut self.partial);
                joined.extend_from_slice(line);
                self.line(&joined, &mut on_item);
                joined.clear();
                self.partial = joined;
            }
        }
        self.partial.extend_from_slice(chunk);
    }

    fn line(&mut self, line: &[u8], on_item: &mut impl FnMut(Item)) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            let event = self.event.take();
            if std::mem::take(&mut self.has_data) {
                on_item(Item::Event(Event {
                    id: self.last_id.clone(),
                    event,
                    data: std::mem::take(&mut self.data),
                }));
            }
            return;
        }
        let text = String::from_utf8_lossy(line);
        if let Some(comment) = text.strip_prefix(':') {
            on_item(Item::Comment(comment.trim().to_owned()));
            return;
        }
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*text, ""),
        };
        match field {
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: &str = "id: 41\nevent: task.claimed\ndata: {\"type\":\"task.claimed\"}\n\n";

    fn items(chunks: &[&[u8]]) -> Vec<Item> {
        let mut parser = Parser::default();
        let mut seen = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, |item| seen.push(item));
        }
        seen
    }

    fn event(id: Option<&str>, name: Option<&str>, data: &str) -> Item {
        Item::Event(Event {
            id: id.map(str::to_owned),
            event: name.map(str::to_owned),
            data: data.to_owned(),
        })
    }

    #[test]
    fn an_event_has_its_id_name_and_data() {
        assert_eq!(
            items(&[EVENT.as_bytes()]),
            [event(
                Some("41"),
                Some("task.claimed"),
                r#"{"type":"task.claimed"}"#
            )]
        );
    }

    #[test]
    fn an_event_cut_anywhere_reads_the_same() {
        let whole = items(&[EVENT.as_bytes()]);
        for at in 1..EVENT.len() {
            let (a, b) = EVENT.as_bytes().split_at(at);
            assert_eq!(items(&[a, b]), whole, "cut at {at}");
        }
    }

    #[test]
    fn comments_are_items_and_blocks_without_data_are_no_events() {
        let seen = items(&[b": keep-alive\n\nid: 3\n\n:x\r\n\r\n"]);
        assert_eq!(
            seen,
            [
                Item::Comment("keep-alive".into()),
                Item::Comment("x".into())
            ]
        );
    }

    #[test]
    fn the_last_id_carries_over_and_data_lines_join() {
        let seen = items(&[b"id: 3\n\nevent: changed\ndata: a\ndata:b\r\n\r\ndata: c\n\n"]);
        assert_eq!(
            seen,
            [
                event(Some("3"), Some("changed"), "a\nb"),
                event(Some("3"), None, "c")
            ]
        );
    }

    #[test]
    fn a_character_cut_between_chunks_is_joined() {
        let text = "data: é\n\n".as_bytes();
        let at = text
            .iter()
            .position(|&b| b > 0x7f)
            .expect("a multibyte character")
            + 1;
        let (a, b) = text.split_at(at);
        assert_eq!(items(&[a, b]), [event(None, None, "é")]);
    }
}
