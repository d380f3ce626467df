//! Standup periods by cadence. `Period` is in `domain::period`; what ties
//! it to the api's `Cadence` is here, above both. The path
//! `reports::period::Period` stays for the api's decoder until it names
//! `domain::period::Period`.

use crate::api::Cadence;
pub use crate::domain::period::Period;

impl Period {
    /// The period of `cadence` holding the instant `ms`.
    pub fn containing(cadence: Cadence, ms: i64) -> Self {
        match cadence {
            Cadence::Daily => Period::day_of(ms),
            Cadence::Weekly => Period::week_of(ms),
            Cadence::Monthly => Period::month_of(ms),
        }
    }

    pub fn cadence(self) -> Cadence {
        match self {
            Period::Day(_) => Cadence::Daily,
            Period::Week(_) => Cadence::Weekly,
            Period::Month(_) => Cadence::Monthly,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn the_period_holding_an_instant_has_utc_bounds() {
        let t = at("2026-11-24T13:30:00Z");
        let day = Period::containing(Cadence::Daily, t);
        assert_eq!(day.to_string(), "2026-11-24");
        assert_eq!(
            day.bounds(),
            (at("2026-11-24T00:00:00Z"), at("2026-11-25T00:00:00Z"))
        );
        let week = Period::containing(Cadence::Weekly, t);
        assert_eq!(week.to_string(), "2026-W48");
        assert_eq!(week.bounds().0, at("2026-11-23T00:00:00Z"));
        assert_eq!(week.bounds().1, at("2026-11-30T00:00:00Z"));
        let month = Period::containing(Cadence::Monthly, t);
        assert_eq!(
            month.bounds(),
            (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(month.previous().to_string(), "2026-10");
        assert_eq!(week.previous().to_string(), "2026-W47");
        assert_eq!(
            Period::containing(Cadence::Weekly, at("2027-01-01T00:00:00Z")).to_string(),
            "2026-W53"
        );
    }
}
