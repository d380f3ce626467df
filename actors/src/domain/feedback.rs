//! Feedback: validation of a message, and the built-in content filter's
//! whole-word matching.

use serde_json::{Map, Value};

use crate::error::ValidationError;

pub const MAX_MESSAGE_CHARS: usize = 4096;
pub const MAX_FIRST_LINE_CHARS: usize = 256;
pub const FEEDBACK_TYPES: [&str; 3] = ["bug", "feature", "general"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    pub message: String,
    pub kind: &'static str,
}

impl Feedback {
    /// The task title: the first line, or the start of the message when the
    /// first line is blank.
    pub fn title(&self) -> String {
        let first = self.message.lines().next().unwrap_or("").trim();
        if first.is_empty() {
            self.message
                .trim()
                .chars()
                .take(MAX_FIRST_LINE_CHARS)
                .collect()
        } else {
            first.to_owned()
        }
    }
}

/// `POST /feedback` body.
pub fn feedback(body: &Value) -> Result<Feedback, ValidationError> {
    let empty = Map::new();
    let obj = match body {
        Value::Object(o) => o,
        Value::Null => &empty,
        _ => return Err(ValidationError::new("request body must be a JSON object")),
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !["message", "type"].contains(&k.as_str()))
    {
        return Err(ValidationError::field(k, "unknown field"));
    }
    let message = match obj.get("message") {
        None | Some(Value::Null) => return Err(ValidationError::field("message", "is required")),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ValidationError::field("message", "must be a string")),
    };
    if message.trim().is_empty() {
        return Err(ValidationError::field("message", "must not be empty"));
    }
    if message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(ValidationError::field(
            "message",
            format!("must be at most {MAX_MESSAGE_CHARS} characters"),
        ));
    }
    let first_line = message.lines().next().unwrap_or("");
    if first_line.chars().count() > MAX_FIRST_LINE_CHARS {
        return Err(ValidationError::field(
            "message",
            format!("the first line must be at most {MAX_FIRST_LINE_CHARS} characters"),
        ));
    }
    let kind = match obj.get("type") {
        None | Some(Value::Null) => "general",
        Some(Value::String(t)) => FEEDBACK_TYPES.into_iter().find(|k| k == t).ok_or_else(|| {
            ValidationError::field("type", "must be one of bug, feature, general")
        })?,
        Some(_) => return Err(ValidationError::field("type", "must be a string")),
    };
    Ok(Feedback { message, kind })
}

/// Lowercased words of `text`: runs of letters, digits and apostrophes.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Terms matched case-insensitively as whole words (a term of several words
/// matches them in sequence).
#[derive(Debug, Clone, Default)]
pub struct TermList {
    terms: Vec<Vec<String>>,
}

impl TermList {
    pub fn new<'a>(terms: impl IntoIterator<Item = &'a str>) -> Self {
        let mut list = Self::default();
        list.extend(terms);
        list
    }

    pub fn extend<'a>(&mut self, terms: impl IntoIterator<Item = &'a str>) {
        self.terms
            .extend(terms.into_iter().map(words).filter(|w| !w.is_empty()));
    }

    pub fn matches(&self, text: &str) -> bool {
        let text = words(text);
        self.terms
            .iter()
            .any(|term| text.windows(term.len()).any(|w| w == term.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn validates_messages_and_types() {
        let f = feedback(&json!({"message": "It broke\nwhen I clicked"})).unwrap();
        assert_eq!((f.kind, f.title().as_str()), ("general", "It broke"));
        assert!(feedback(&json!({})).is_err());
        assert!(feedback(&json!({"message": 5})).is_err());
        assert!(feedback(&json!({"message": "x".repeat(4097)})).is_err());
        assert!(feedback(&json!({"message": "x".repeat(4096)})).is_err());
        assert!(feedback(&json!({"message": format!("{}\nrest", "x".repeat(256))})).is_ok());
        assert!(feedback(&json!({"message": "hi", "type": "rant"})).is_err());
        assert_eq!(
            feedback(&json!({"message": "hi", "type": "bug"}))
                .unwrap()
                .kind,
            "bug"
        );
    }

    #[test]
    fn terms_match_whole_words_in_any_case() {
        let list = TermList::new(["darn", "go away now"]);
        assert!(list.matches("Well DARN it"));
        assert!(!list.matches("darnation"));
        assert!(list.matches("please, go away  now!"));
        assert!(!list.matches("go away later"));
    }
}
