//! The shape of a Prometheus HTTP API answer to `/api/v1/query_range` (the caller decodes
//! the JSON; this module only says what it holds and what an error answer means).
//!
//! ```json
//! {"status": "success",
//!  "data": {"resultType": "matrix",
//!           "result": [{"metric": {"namespace": "team-a", …}, "values": [[1767225600, "1.5"], …]}]}}
//! {"status": "error", "errorType": "bad_data", "error": "…"}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An answer of the Prometheus HTTP API.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromResponse {
    /// `success` or `error`.
    pub status: String,
    /// The result, on success.
    #[serde(default)]
    pub data: Option<PromData>,
    /// The error class (`bad_data`, `timeout`, `execution`, …), on error.
    #[serde(default)]
    pub error_type: Option<String>,
    /// The error message, on error.
    #[serde(default)]
    pub error: Option<String>,
    /// Warnings Prometheus attached (the answer may be partial).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// `data` of a query answer.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromData {
    /// `matrix` for a range query.
    pub result_type: String,
    /// The series.
    #[serde(default)]
    pub result: Vec<Series>,
}

/// One series of a range query: its labels and `[time, "value"]` samples.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Series {
    /// Label name → value.
    #[serde(default)]
    pub metric: BTreeMap<String, String>,
    /// `[Unix seconds (may be fractional), value as a string]`.
    #[serde(default)]
    pub values: Vec<(f64, String)>,
}

impl Series {
    /// A label's value, `""` when absent (as PromQL treats it).
    pub fn label(&self, name: &str) -> &str {
        self.metric.get(name).map_or("", String::as_str)
    }

    /// The samples as (Unix milliseconds, value), skipping values that are not finite
    /// numbers (`NaN`, `±Inf`, or not a number at all).
    pub fn samples(&self) -> impl Iterator<Item = (i64, f64)> + '_ {
        self.values.iter().filter_map(|(t, v)| {
            let v: f64 = v.parse().ok()?;
            #[allow(clippy::cast_possible_truncation)]
            let t_ms = (t * 1000.0).round() as i64;
            v.is_finite().then_some((t_ms, v))
        })
    }
}

/// Why an answer holds no matrix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Prometheus answered `status: error`.
    #[error("Prometheus refused the query ({error_type}): {error}")]
    Refused {
        /// `errorType`.
        error_type: String,
        /// `error`.
        error: String,
    },
    /// A success without a matrix (not an answer to a range query).
    #[error("Prometheus answered a {0:?} result where a range query's matrix was expected")]
    NotAMatrix(String),
}

impl PromResponse {
    /// The series of a range query's answer, or why there are none.
    pub fn into_matrix(self) -> Result<Vec<Series>, AnswerError> {
        if self.status != "success" {
            return Err(AnswerError::Refused {
                error_type: self.error_type.unwrap_or_else(|| self.status.clone()),
                error: self.error.unwrap_or_default(),
            });
        }
        let data = self.data.unwrap_or_default();
        if data.result_type != "matrix" {
            return Err(AnswerError::NotAMatrix(data.result_type));
        }
        Ok(data.result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_answer_gives_its_series_and_finite_samples() {
        let json = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"namespace":"a","resource":"requests.cpu"},
             "values":[[1767225600,"1.5"],[1767225601.5,"2"],[1767225602,"NaN"],[1767225603,"+Inf"],[1767225604,"x"]]}]}}"#;
        let r: PromResponse = serde_json::from_str(json).unwrap();
        let m = r.into_matrix().unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].label("namespace"), "a");
        assert_eq!(m[0].label("cluster"), "");
        let s: Vec<(i64, f64)> = m[0].samples().collect();
        assert_eq!(s, [(1_767_225_600_000, 1.5), (1_767_225_601_500, 2.0)]);
    }

    #[test]
    fn an_error_answer_says_what_prometheus_said() {
        let json =
            r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"start\""}"#;
        let r: PromResponse = serde_json::from_str(json).unwrap();
        let e = r.into_matrix().unwrap_err();
        assert_eq!(
            e.to_string(),
            "Prometheus refused the query (bad_data): invalid parameter \"start\""
        );
        let json = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let r: PromResponse = serde_json::from_str(json).unwrap();
        assert_eq!(
            r.into_matrix(),
            Err(AnswerError::NotAMatrix("vector".into()))
        );
    }
}
