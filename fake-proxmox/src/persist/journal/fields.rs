//! A struct as JSON field by field: each top-level field's name and its value's JSON, as
//! `serde_json` writes them. The journal compares a site's small parts with what it wrote
//! last this way and writes only the fields that differ; going through `Serialize` keeps
//! every field the site has (or gains) covered without naming them here.

use serde::Serialize;
use serde::ser::{Error as _, Impossible, SerializeStruct, Serializer};

/// The fields of `value`, in order, each with its JSON; an error when `value` does not
/// serialise as a plain struct (the caller then writes it whole).
pub(super) fn split<T: Serialize>(value: &T) -> Result<Vec<(&'static str, Vec<u8>)>, Error> {
    value.serialize(Split)
}

type Error = serde_json::Error;

fn not_a_struct<T>() -> Result<T, Error> {
    Err(Error::custom("not a struct"))
}

struct Split;

struct Fields(Vec<(&'static str, Vec<u8>)>);

impl SerializeStruct for Fields {
    type Ok = Vec<(&'static str, Vec<u8>)>;
    type Error = Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.0.push((key, serde_json::to_vec(value)?));
        Ok(())
    }

    fn end(self) -> Result<Self::Ok, Error> {
        Ok(self.0)
    }
}

/// Everything but a struct is refused.
macro_rules! refuse {
    ($($name:ident($($arg:ty),*);)*) => {
        $(fn $name(self $(, _: $arg)*) -> Result<Self::Ok, Error> {
            not_a_struct()
        })*
    };
}

impl Serializer for Split {
    type Ok = Vec<(&'static str, Vec<u8>)>;
    type Error = Error;
    type SerializeSeq = Impossible<Self::Ok, Error>;
    type SerializeTuple = Impossible<Self::Ok, Error>;
    type SerializeTupleStruct = Impossible<Self::Ok, Error>;
    type SerializeTupleVariant = Impossible<Self::Ok, Error>;
    type SerializeMap = Impossible<Self::Ok, Error>;
    type SerializeStruct = Fields;
    type SerializeStructVariant = Impossible<Self::Ok, Error>;

    refuse! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_str(&str);
        serialize_bytes(&[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<Self::Ok, Error> {
        not_a_struct()
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, Error> {
        not_a_struct()
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, Error> {
        not_a_struct()
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        not_a_struct()
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        not_a_struct()
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        not_a_struct()
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        not_a_struct()
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        not_a_struct()
    }

    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Fields, Error> {
        Ok(Fields(Vec::with_capacity(len)))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        not_a_struct()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[derive(Serialize)]
    struct S {
        a: u32,
        #[serde(rename = "bee")]
        b: Vec<&'static str>,
        #[serde(skip)]
        _c: u8,
    }

    #[test]
    fn a_struct_splits_into_its_fields_as_serde_json_writes_them() {
        let s = S {
            a: 7,
            b: vec!["x", "\"y\""],
            _c: 1,
        };
        let f = split(&s).unwrap();
        let f: Vec<(&str, &str)> = f
            .iter()
            .map(|(k, v)| (*k, std::str::from_utf8(v).unwrap()))
            .collect();
        assert_eq!(f, [("a", "7"), ("bee", r#"["x","\"y\""]"#)]);
    }

    #[test]
    fn anything_else_is_refused() {
        assert!(split(&7u32).is_err());
        assert!(split(&std::collections::BTreeMap::<String, u8>::new()).is_err());
    }
}
