//! The board's change mark (CONTRACT §8): which state of an org's open
//! tasks a page was made at, or a notice tells of. A browser keeps its
//! text (`idle`, or the actor's number and its version: `7.40`) and sends
//! it back (`X-Board-Mark`, `?mark=`); inside, it is a [`ChangeMark`],
//! read from that text once where it arrives and written only where it
//! leaves.
//!
//! A version counts only within one run of one actor: an org's actor that
//! starts again numbers its changes afresh from what it loads, so marks of
//! two runs never compare.

use std::fmt;
use std::str::FromStr;

use super::open::StatusCounts;

/// Which state of an org's open tasks a page or a notice stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeMark {
    /// No actor of the org runs on this node: nothing of it can change
    /// until one starts.
    Idle,
    /// The open tasks at `version`, as the org's actor numbered `actor`
    /// counts their changes.
    At { actor: u64, version: u64 },
}

/// A mark's text that does not read as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a change mark")]
pub struct NotAMark;

impl ChangeMark {
    /// Whether a read made once the notice of this mark was sent shows
    /// every change that the notices up to `wanted` named: both marks of
    /// one actor's run, and `wanted` not later. An idle mark covers
    /// nothing and is covered by nothing.
    pub fn covers(&self, wanted: &ChangeMark) -> bool {
        match (self, wanted) {
            (
                ChangeMark::At { actor, version },
                ChangeMark::At {
                    actor: wanted_actor,
                    version: wanted_version,
                },
            ) => actor == wanted_actor && wanted_version <= version,
            (ChangeMark::Idle, _) | (_, ChangeMark::Idle) => false,
        }
    }
}

impl fmt::Display for ChangeMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeMark::Idle => f.write_str("idle"),
            ChangeMark::At { actor, version } => write!(f, "{actor}.{version}"),
        }
    }
}

impl FromStr for ChangeMark {
    type Err = NotAMark;

    /// Reads only what `Display` writes.
    fn from_str(s: &str) -> Result<Self, NotAMark> {
        if s == "idle" {
            return Ok(ChangeMark::Idle);
        }
        let number = |digits: &str| {
            let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            all_digits.then(|| digits.parse::<u64>().ok()).flatten()
        };
        let (actor, version) = s.split_once('.').ok_or(NotAMark)?;
        match (number(actor), number(version)) {
            (Some(actor), Some(version)) => Ok(ChangeMark::At { actor, version }),
            _ => Err(NotAMark),
        }
    }
}

impl serde::Serialize for ChangeMark {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ChangeMark {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for ChangeMark {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ChangeMark".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(idle|[0-9]+\\.[0-9]+)$",
        })
    }
}

/// An org's open tasks per status at a mark: what a board's notice says
/// of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkedCounts {
    pub mark: ChangeMark,
    pub counts: StatusCounts,
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn at(actor: u64, version: u64) -> ChangeMark {
        ChangeMark::At { actor, version }
    }

    #[test]
    fn a_read_covers_the_notices_up_to_its_own_of_the_same_actor() {
        let idle = ChangeMark::Idle;
        // (read after, wanted, covered)
        let table = [
            (at(7, 40), at(7, 40), true),
            (at(7, 40), at(7, 3), true),
            (at(7, 40), at(7, 41), false),
            (at(8, 40), at(7, 3), false),
            (at(7, 40), idle, false),
            (idle, at(7, 1), false),
            (idle, idle, false),
        ];
        for (read_after, wanted, covered) in table {
            assert_eq!(
                read_after.covers(&wanted),
                covered,
                "{read_after} covers {wanted}"
            );
        }
    }

    #[test]
    fn a_mark_reads_back_from_its_text_and_nothing_else_reads() {
        for mark in [ChangeMark::Idle, at(7, 40), at(0, 0), at(u64::MAX, 1)] {
            assert_eq!(mark.to_string().parse::<ChangeMark>(), Ok(mark));
        }
        assert_eq!(at(7, 40).to_string(), "7.40");
        assert_eq!(ChangeMark::Idle.to_string(), "idle");
        for bad in [
            "",
            "7.",
            ".7",
            "7.x",
            "7.-1",
            "-7.1",
            "7.+1",
            "7.1.2",
            "7",
            "IDLE",
            " 7.1",
            "x.1",
            "7.18446744073709551616",
        ] {
            assert_eq!(bad.parse::<ChangeMark>(), Err(NotAMark), "{bad:?}");
        }
    }

    #[test]
    fn a_mark_is_its_text_in_json() {
        assert_eq!(serde_json::to_string(&at(3, 9)).unwrap(), "\"3.9\"");
        let read: ChangeMark = serde_json::from_str("\"idle\"").unwrap();
        assert_eq!(read, ChangeMark::Idle);
        assert!(serde_json::from_str::<ChangeMark>("\"garbage\"").is_err());
    }
}
