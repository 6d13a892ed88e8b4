//! Karmada's `int32` fields read tolerantly: any JSON integer, saturated into `i32`.
//!
//! kube-apiserver does not enforce an OpenAPI `format: int32` on a custom resource's
//! fields, so a writer with update rights on ResourceBindings can store
//! `replicas: 2147483648` (or a priority, a group count) that a strict `i32` refuses.
//! A binding the webhook or the controller cannot decode is one whose charge nobody
//! knows: the controller would leave it out of `used`. Read saturated instead, every such
//! binding is charged: a count past `i32::MAX` as `i32::MAX` (far past any quota, so
//! never less than it can run), one below `i32::MIN` as `i32::MIN` (which the charge
//! counts as 0, as it counts every negative count). An integral float (`2.0`, `1e10`) is
//! read the same way; anything else (a fraction, a string, a bool) is still an error.

use serde::de::{self, Deserializer, Visitor};

struct Saturating;

impl Visitor<'_> for Saturating {
    type Value = i32;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i32, E> {
        Ok(i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX }))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i32, E> {
        Ok(i32::try_from(v).unwrap_or(i32::MAX))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i32, E> {
        if v.is_finite() && v.fract() == 0.0 {
            // `as` saturates a float that does not fit.
            Ok(v as i32)
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
}

/// `#[serde(deserialize_with = "crate::int32::saturating")]` on an `i32` field.
pub fn saturating<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    d.deserialize_any(Saturating)
}

/// An `i32` read by [`saturating`], for serde's own `Option` to wrap.
#[derive(serde::Deserialize)]
struct Saturated(#[serde(deserialize_with = "saturating")] i32);

/// The same for an `Option<i32>` field (`null` or absent: `None`; with
/// `#[serde(default)]`).
pub fn saturating_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    Ok(<Option<Saturated> as serde::Deserialize>::deserialize(d)?.map(|s| s.0))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct T {
        #[serde(default, deserialize_with = "super::saturating")]
        n: i32,
        #[serde(default, deserialize_with = "super::saturating_option")]
        o: Option<i32>,
    }

    fn read(json: &str) -> Result<T, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn integers_past_int32_saturate_and_the_rest_read_as_before() {
        let n = |json: &str| read(json).map(|t| t.n);
        assert_eq!(n(r#"{"n": 3}"#), Ok(3));
        assert_eq!(n(r#"{"n": -1}"#), Ok(-1));
        assert_eq!(n(r#"{"n": 2147483647}"#), Ok(i32::MAX));
        assert_eq!(n(r#"{"n": 2147483648}"#), Ok(i32::MAX));
        assert_eq!(n(r#"{"n": 18446744073709551615}"#), Ok(i32::MAX));
        assert_eq!(n(r#"{"n": -2147483649}"#), Ok(i32::MIN));
        assert_eq!(n(r#"{"n": 2.0}"#), Ok(2));
        assert_eq!(n(r#"{"n": 1e30}"#), Ok(i32::MAX));
        assert_eq!(n(r#"{}"#), Ok(0));
        for bad in [
            r#"{"n": 1.5}"#,
            r#"{"n": "2"}"#,
            r#"{"n": true}"#,
            r#"{"n": null}"#,
        ] {
            assert!(read(bad).is_err(), "{bad} must not read");
        }
    }

    #[test]
    fn a_binding_with_every_int32_field_past_int32_decodes_saturated() {
        let big = 2_147_483_648_i64;
        let spec: crate::binding::ResourceBindingSpec = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "replicas": big,
            "replicaRequirements": {"resourceRequest": {"cpu": "1"}},
            "components": [{"name": "a", "replicas": big}],
            "clusters": [{"name": "m1", "replicas": big, "components": [{"name": "a", "replicas": big}]}],
            "placement": {"spreadConstraints": [{"spreadByField": "cluster", "maxGroups": big, "minGroups": -big}]},
            "gracefulEvictionTasks": [{"fromCluster": "m2", "replicas": big, "gracePeriodSeconds": big}],
            "schedulePriority": {"priority": -big - 1}
        }))
        .expect("decodes");
        assert_eq!(spec.replicas, i32::MAX);
        assert_eq!(spec.components[0].replicas, i32::MAX);
        assert_eq!(spec.clusters[0].replicas, i32::MAX);
        assert_eq!(spec.clusters[0].components[0].replicas, i32::MAX);
        let spread = &spec.placement.as_ref().unwrap().spread_constraints[0];
        assert_eq!((spread.max_groups, spread.min_groups), (i32::MAX, i32::MIN));
        let task = &spec.graceful_eviction_tasks[0];
        assert_eq!(
            (task.replicas, task.grace_period_seconds),
            (Some(i32::MAX), Some(i32::MAX))
        );
        assert_eq!(spec.schedule_priority.unwrap().priority, i32::MIN);
    }

    #[test]
    fn an_optional_count_saturates_too_and_null_is_none() {
        let o = |json: &str| read(json).map(|t| t.o);
        assert_eq!(o(r#"{}"#), Ok(None));
        assert_eq!(o(r#"{"o": null}"#), Ok(None));
        assert_eq!(o(r#"{"o": 4}"#), Ok(Some(4)));
        assert_eq!(o(r#"{"o": 4294967296}"#), Ok(Some(i32::MAX)));
        assert!(read(r#"{"o": "4"}"#).is_err());
    }
}
