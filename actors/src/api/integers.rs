//! The one rule for integers: to JSON Schema, which every request is
//! checked against first, a number without a fractional part is an
//! integer (`905.0`, `1e3`); serde's integers take only numbers written
//! without a fraction. [`Integers`] reads a request as serde_json reads a
//! `Value`, except that every field serde reads as an integer (`u8` to
//! `i128`, wherever it sits) takes a JSON Schema integer. Every other
//! number is read as it was written: free-form content (metadata, output,
//! a client envelope) keeps `2.0` as `2.0`.

use serde::de::value::SeqDeserializer;
use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer, MapDeserializer};
use serde::de::{Deserializer, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::{Error, Number, Value};

/// A request's JSON, read with JSON Schema's integers.
#[derive(Clone, Copy)]
pub(super) struct Integers<'de>(pub &'de Value);

impl<'de> Integers<'de> {
    /// The value as an integer, when it is a number with no fraction that
    /// an `i64` or a `u64` holds exactly.
    fn integral(self) -> Option<Value> {
        let f = self.0.as_f64().filter(|_| self.0.is_f64())?;
        if f.fract() != 0.0 {
            return None;
        }
        // In [-2^63, 2^63), and in [0, 2^64), the casts are exact: a float
        // with no fraction there is an integer of that type. (`i64::MIN` is
        // -2^63 as a float; `u64::MAX` rounds to 2^64.)
        let two_pow_63 = -(i64::MIN as f64);
        if (-two_pow_63..two_pow_63).contains(&f) {
            Some(Value::Number(Number::from(f as i64)))
        } else if (0.0..u64::MAX as f64).contains(&f) {
            Some(Value::Number(Number::from(f as u64)))
        } else {
            None
        }
    }
}

impl<'de> IntoDeserializer<'de, Error> for Integers<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

/// An integer hint: the value as that integer when it is one to JSON
/// Schema, else as serde_json reads it (which refuses it).
macro_rules! integer {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.integral() {
                Some(integer) => integer.$method(visitor),
                None => self.0.$method(visitor),
            }
        }
    )*};
}

impl<'de> Deserializer<'de> for Integers<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(Integers));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(fields) => {
                let mut map = MapDeserializer::new(
                    fields
                        .iter()
                        .map(|(k, v)| (BorrowedStrDeserializer::new(k), Integers(v))),
                );
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            scalar => scalar.deserialize_any(visitor),
        }
    }

    integer! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            // `{"variant": content}`: the content read with these rules.
            Value::Object(fields) if fields.len() == 1 => {
                let map = MapDeserializer::new(
                    fields
                        .iter()
                        .map(|(k, v)| (BorrowedStrDeserializer::new(k), Integers(v))),
                );
                visitor.visit_enum(MapAccessDeserializer::new(map))
            }
            // A unit variant's name, or a refusal in serde_json's words.
            other => other.deserialize_enum(name, variants, visitor),
        }
    }

    /// Scalars as serde_json reads them; arrays and objects item by item.
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_unit(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_bytes(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_byte_buf(visitor)
    }

    forward_to_deserialize_any! {
        bool f32 f64 char str string seq tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Request {
        count: u8,
        #[serde(default)]
        limit: Option<i64>,
        #[serde(default)]
        caps: BTreeMap<String, Option<u32>>,
        #[serde(default)]
        free: Option<Value>,
        #[serde(default)]
        ratio: Option<f64>,
        #[serde(default)]
        pair: Option<(u16, String)>,
        #[serde(default)]
        kind: Option<Kind>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Plain,
        Sized(u32),
    }

    fn read(v: Value) -> Result<Request, Error> {
        Request::deserialize(Integers(&v))
    }

    #[test]
    fn every_integer_field_takes_a_number_without_a_fraction() {
        let r = read(json!({
            "count": 3.0, "limit": 9.007_199_254_740_991e15, "caps": {"tags": 1e3, "teams": null},
            "pair": [7.0, "x"], "kind": {"sized": 2.0}
        }))
        .unwrap();
        assert_eq!(
            (r.count, r.limit, r.pair, r.kind),
            (
                3,
                Some(9_007_199_254_740_991),
                Some((7, "x".to_owned())),
                Some(Kind::Sized(2))
            )
        );
        assert_eq!(r.caps["tags"], Some(1000));
        assert_eq!(r.caps["teams"], None);
        let r = read(json!({"count": -0.0, "limit": -9.0e18, "kind": "plain"})).unwrap();
        assert_eq!(
            (r.count, r.limit, r.kind),
            (0, Some(-9_000_000_000_000_000_000), Some(Kind::Plain))
        );
    }

    #[test]
    fn other_numbers_are_read_as_written() {
        let r =
            read(json!({"count": 1, "free": {"ratio": 2.0, "n": [1.0, 3]}, "ratio": 2.0})).unwrap();
        assert_eq!(r.free, Some(json!({"ratio": 2.0, "n": [1.0, 3]})));
        assert!(r.free.unwrap()["ratio"].is_f64(), "kept as a float");
        assert_eq!(r.ratio, Some(2.0));
    }

    #[test]
    fn fractions_and_integers_out_of_range_are_refused_as_serde_json_refuses_them() {
        let e = read(json!({"count": 2.5})).unwrap_err().to_string();
        assert_eq!(e, "invalid type: floating point `2.5`, expected u8");
        let e = read(json!({"count": 300.0})).unwrap_err().to_string();
        assert_eq!(e, "invalid value: integer `300`, expected u8");
        let e = read(json!({"count": 1, "limit": 1e19}))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid value: integer `10000000000000000000`, expected i64"
        );
        let e = read(json!({"count": 1, "limit": 1e300}))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid type: floating point"), "{e}");
        let e = read(json!({"count": 1, "colour": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("unknown field `colour`"), "{e}");
        let e = read(json!({"count": 1, "pair": [1, "x", 2]}))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid length 3"), "{e}");
    }
}
