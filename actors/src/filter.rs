//! The feedback content filter: a seam, so the engine can use the built-in
//! term list, no filter, or a moderation service the binary talks to.

use std::future::Future;
use std::pin::Pin;

use crate::domain::feedback::TermList;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Clean,
    Abusive,
}

/// The filter could not decide (a moderation service unreachable or failing).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the content filter is unavailable: {0}")]
pub struct FilterUnavailable(pub String);

pub type FilterFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Verdict, FilterUnavailable>> + Send + 'a>>;

pub trait ContentFilter: Send + Sync + 'static {
    fn check<'a>(&'a self, text: &'a str) -> FilterFuture<'a>;
}

/// Lets everything through (`TASKQ_FEEDBACK_FILTER=off`).
pub struct NoFilter;

impl ContentFilter for NoFilter {
    fn check<'a>(&'a self, _: &'a str) -> FilterFuture<'a> {
        Box::pin(async { Ok(Verdict::Clean) })
    }
}

/// Abusive terms every deployment refuses; operators add their own.
const BUILTIN_TERMS: &[&str] = &[
    "fuckwit",
    "fucktard",
    "motherfucker",
    "cunt",
    "retard",
    "kill yourself",
    "kys",
    "go die",
    "shithead",
    "dickhead",
    "piece of shit",
    "scumbag",
];

/// The built-in term list, extended by the operator's terms.
pub struct TermFilter {
    terms: TermList,
}

impl TermFilter {
    pub fn builtin<'a>(extra: impl IntoIterator<Item = &'a str>) -> Self {
        let mut terms = TermList::new(BUILTIN_TERMS.iter().copied());
        terms.extend(extra);
        Self { terms }
    }
}

impl ContentFilter for TermFilter {
    fn check<'a>(&'a self, text: &'a str) -> FilterFuture<'a> {
        let verdict = if self.terms.matches(text) {
            Verdict::Abusive
        } else {
            Verdict::Clean
        };
        Box::pin(async move { Ok(verdict) })
    }
}
