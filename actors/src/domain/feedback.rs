//! The built-in feedback content filter's whole-word matching.

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
    use super::*;

    #[test]
    fn terms_match_whole_words_in_any_case() {
        let list = TermList::new(["darn", "go away now"]);
        assert!(list.matches("Well DARN it"));
        assert!(!list.matches("darnation"));
        assert!(list.matches("please, go away  now!"));
        assert!(!list.matches("go away later"));
    }
}
